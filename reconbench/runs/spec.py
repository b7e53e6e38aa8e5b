"""What to run against a target: the attack, its init regime, search and precision."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class RunSpec:
    """What to run against a target."""

    attack: str
    attack_config: dict[str, Any] = field(default_factory=dict)
    init: str = "gaussian"
    init_config: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    candidates: int | None = None   # m; None: 2n
    search_runs: int = 1            # 1: the given config; >1: random search over the attack's declared space
    dtype: str = "float64"
    device: str = "cpu"
    protocol: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
