"""What to run against a target: the attack, its init regime, search and precision."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from reconbench.attack.search import DEFAULT_SEARCH


@dataclass
class RunSpec:
    """What to run against a target."""

    attack: str
    attack_config: dict[str, Any] = field(default_factory=dict)
    init: str = "gaussian"
    init_config: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    candidates: int | None = None   # m; None: 2n
    search_runs: int = 1            # 1: the given config; >1: a search over the attack's declared space
    dtype: str = "float64"
    device: str = "cpu"
    protocol: dict[str, Any] = field(default_factory=dict)
    search: str = DEFAULT_SEARCH    # the search strategy (see `reconbench list searches`)
    search_config: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The spec as recorded and hashed; the default search is left out, so that records and run keys of the
        default random search are those written before strategies could be chosen."""
        out = asdict(self)
        if self.search == DEFAULT_SEARCH and not self.search_config:
            del out["search"], out["search_config"]
        return out
