"""What an evaluation computes from the problem alone (training features, the non-member pool of the membership
test, ...), kept per problem object while it lives.

A run scores its problem many times: the pooled evaluation, each selected run, every reported null draw; each built
the training images' features, the decoys' features and the membership test's non-member side again, although
none depends on the candidates. They are kept here, per problem object and key, and dropped with the problem (a weak
reference) or by :func:`clear` (``null.clear_caches`` calls it). A problem's images are not changed after it is
built (a changed copy is another object); values handed out are shared and must not be written.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from reconbench.data import Problem

T = TypeVar("T")

_MEMO: dict[int, tuple[weakref.ref[Problem], dict[Hashable, Any]]] = {}


def memo(problem: Problem, key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()`` for this problem object and key, computed on first use."""
    pid = id(problem)
    entry = _MEMO.get(pid)
    if entry is None or entry[0]() is not problem:
        def forget(ref: weakref.ref[Problem], pid: int = pid) -> None:
            if pid in _MEMO and _MEMO[pid][0] is ref:
                del _MEMO[pid]

        entry = (weakref.ref(problem, forget), {})
        _MEMO[pid] = entry
    values = entry[1]
    if key not in values:
        values[key] = compute()
    return values[key]   # type: ignore[no-any-return]


def clear() -> None:
    """Forget every problem's values (each is computed again on its next use)."""
    _MEMO.clear()


__all__ = ["clear", "memo"]
