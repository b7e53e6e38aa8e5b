"""A thin progress reporter over tqdm that every long loop uses; ``quiet`` turns it off."""

from __future__ import annotations

import sys
from types import TracebackType

from tqdm.auto import tqdm


class Progress:
    def __init__(self, total: int, desc: str, quiet: bool = False, every: int = 1) -> None:
        self.quiet = quiet
        self._bar = None if quiet else tqdm(total=total, desc=desc, leave=False, file=sys.stderr,
                                            dynamic_ncols=True, mininterval=0.5)
        self._last = 0

    def update(self, done: int, info: dict[str, float] | None = None) -> None:
        if self._bar is None:
            return
        self._bar.update(done - self._last)
        self._last = done
        if info:
            self._bar.set_postfix({k: f"{v:.4g}" for k, v in info.items()}, refresh=False)

    def __call__(self, step: int, total: int, info: dict[str, float] | None = None) -> None:
        self.update(step, info)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.close()
