"""Run the reconbench CLI in a subprocess with the toy attack registered (used by the kill-and-resume test).

``toy_logged`` behaves like the conftest toy attack, and also sleeps ``RECONBENCH_TEST_SLEEP`` seconds per run
and appends the SHA-256 of its starting candidates and target weights to ``RECONBENCH_TEST_LOG`` (a line
per attack run).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conftest import ToyAttack, ToyPlugin  # noqa: E402

from reconbench import hookimpl, plugins  # noqa: E402


def x0_digest(x0, model=None) -> str:  # type: ignore[no-untyped-def]
    """Identifies an attack run: its starting candidates (and, when given, the target's weights)."""
    h = hashlib.sha256(x0.detach().cpu().double().contiguous().numpy().tobytes())
    for p in model.parameters() if model is not None else []:
        h.update(p.detach().cpu().double().contiguous().numpy().tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class LoggedToy(ToyAttack):
    name: str = "toy_logged"

    def run(self, target, x0, labels, config, *, generator, progress=None):  # type: ignore[no-untyped-def]
        with open(os.environ["RECONBENCH_TEST_LOG"], "a") as f:
            f.write(x0_digest(x0, target.model) + "\n")
        time.sleep(float(os.environ.get("RECONBENCH_TEST_SLEEP", "0")))
        return super().run(target, x0, labels, config, generator=generator, progress=progress)


class LoggedPlugin:
    @hookimpl
    def register_attacks(self, register):  # type: ignore[no-untyped-def]
        register(LoggedToy())


if __name__ == "__main__":
    plugins.host().register(ToyPlugin(), name="toy-test-plugin")
    plugins.host().register(LoggedPlugin(), name="toy-logged-plugin")
    from reconbench.cli import main

    main(sys.argv[1:])
