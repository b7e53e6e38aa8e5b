"""User-facing errors. The CLI prints these without a traceback; anything else is a bug."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ReconbenchError(Exception):
    """An error caused by the user's input or environment, with a message that names the fix."""


class UnknownNameError(ReconbenchError, KeyError):
    """A plugin name that is not registered."""

    def __init__(self, kind: str, name: str, known: Iterable[str], failed: Iterable[str] = ()) -> None:
        known = sorted(known)
        self.known = known
        self.failed = list(failed)   # plugins that failed to load: one of them may be the one that registers it
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        msg = f"unknown {kind} {name!r}."
        if close:
            msg += f" Did you mean: {', '.join(close)}?"
        plural = kind[:-1] + "ies" if kind.endswith("y") else kind + "s"
        listed = {"search strategy": "searches"}.get(kind, f"{kind}s")   # the `reconbench list` kind
        msg += f" Registered {plural}: {', '.join(known) or '(none)'}. See `reconbench list {listed}`."
        if self.failed:
            msg += (f" Plugin(s) that failed to load, which may register it: {', '.join(self.failed)} "
                    "(`reconbench plugins` shows why).")
        super().__init__(msg)
        self.kind, self.name, self.close_matches = kind, name, close

    def __reduce__(self) -> tuple[type, tuple[str, str, list[str], list[str]]]:  # picklable, across processes
        return type(self), (self.kind, self.name, self.known, self.failed)

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


class DataError(ReconbenchError):
    """A data file that is missing, corrupt, or of the wrong shape."""


class ModelCardError(ReconbenchError):
    """A model card that cannot be read or does not match its weights."""


class IncompatibleError(ReconbenchError):
    """An attack, init regime or metric applied to a target it cannot handle."""


class DivergedError(ReconbenchError):
    """A numerical loop produced NaN or inf."""
