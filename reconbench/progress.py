"""A thin progress reporter that every long loop uses.

On a terminal it draws a tqdm bar. When stderr is not a terminal (a log file, a pipe, CI), or with ``quiet``, it
writes a plain line every 30 seconds instead (a redrawn bar would fill a log with escape codes): a loop shorter than
that stays silent, a long one is never silent for longer, so that a command that runs for hours says it is alive.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any

from tqdm.auto import tqdm

#: plain mode: at most one line per this many seconds (plus the first and the last)
PLAIN_EVERY_SECONDS = 30.0


def stderr_is_terminal() -> bool:
    try:
        return bool(sys.stderr.isatty())
    except (AttributeError, ValueError):
        return False


class PlainBar:
    """The part of tqdm's interface the harness uses, printing ``desc: done/total (postfix)`` lines."""

    def __init__(self, total: int, desc: str) -> None:
        self.total, self.desc, self.n = total, desc, 0
        self._postfix: dict[str, Any] = {}
        self._last_print = time.monotonic()
        self._printed_any = False

    def update(self, k: int = 1) -> None:
        self.n += k
        now = time.monotonic()
        if now - self._last_print >= PLAIN_EVERY_SECONDS:
            self._print()

    def set_postfix(self, postfix: dict[str, Any], refresh: bool = True) -> None:
        self._postfix = dict(postfix)

    def _print(self) -> None:
        self._last_print = time.monotonic()
        self._printed_any = True
        extra = ", ".join(f"{k} {v}" for k, v in self._postfix.items())
        total = f"/{self.total}" if self.total else ""
        print(f"{self.desc}: {self.n}{total}" + (f" ({extra})" if extra else ""), file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._printed_any and self.n:  # a long loop: say where it ended; short loops stay silent
            self._print()


class Progress:
    def __init__(self, total: int, desc: str, quiet: bool = False, every: int = 1) -> None:
        self.quiet = quiet
        self._bar: Any = None
        self._bar = (tqdm(total=total, desc=desc, leave=False, file=sys.stderr, dynamic_ncols=True, mininterval=0.5)
                     if stderr_is_terminal() and not quiet else PlainBar(total, desc))
        self._last = 0

    def update(self, done: int, info: dict[str, float] | None = None) -> None:
        if self._bar is None:
            return
        self._bar.update(done - self._last)
        self._last = done
        if info:
            self._bar.set_postfix({k: f"{v:.4g}" for k, v in info.items()}, refresh=False)

    def __call__(self, step: int, total: int, info: dict[str, float] | None = None) -> None:
        """The attacks' progress callback: a loop may learn its total late (a search's steps), so it is updated."""
        if self._bar is not None and self._bar.total != total:
            self._bar.total = total
        self.update(step, info)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.close()
