"""The cost table's door: the first, unstamped form upgraded (its ``attack@<precision>`` keys, its free keys), the
stamped form read strictly, a stamp it does not know refused in one line."""

from __future__ import annotations

import json

import pytest

from reconbench.errors import ReconbenchError
from reconbench.records.cost_table import COST_TABLE_FILE, COST_TABLE_SCHEMA, CostTable, PhaseCost

PHASES = {"train": {"fixed": 1.0, "rate": 2.0}, "attack": {"fixed": 3.0, "rate": 4.0},
          "evaluate": {"fixed": 5.0, "rate": 6.0}}


def test_the_unstamped_form_is_upgraded(tmp_path):
    legacy = {**PHASES, "attack@float64": {"rate": 40.0}, "device": "NVIDIA H100", "from_probe": {"source": "p"}}
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(legacy))
    table = COST_TABLE_FILE.read(path)
    # an attack@ entry takes what it leaves out from the attack's own price
    assert table.attack_at == {"float64": PhaseCost(fixed=3.0, rate=40.0)}
    assert table.about == {"device": "NVIDIA H100", "from_probe": {"source": "p"}}
    assert table.phase("attack", "float64").seconds(2.0) == 83.0 and table.phase("attack", "tf32").seconds(2.0) == 11.0
    # written back stamped, it reads as the same table
    again = CostTable.of(json.loads(json.dumps(table.to_dict())))
    assert again == table and table.to_dict()["format"] == COST_TABLE_SCHEMA


def test_the_stamped_form_is_strict_and_an_unknown_stamp_is_refused():
    with pytest.raises(ReconbenchError, match=r"unknown key \$\.atack_at; rename it to 'attack_at'"):
        CostTable.of({"format": COST_TABLE_SCHEMA, **PHASES, "atack_at": {}})
    with pytest.raises(ReconbenchError, match=r"format 'reconbench-cost-table/9' is not a version"):
        CostTable.of({"format": "reconbench-cost-table/9", **PHASES})
    with pytest.raises(ReconbenchError, match=r"\$\.evaluate: a phase cost needs finite non-negative"):
        CostTable.of({**PHASES, "evaluate": {"fixed": float("inf"), "rate": 0.0}})


def test_a_scaled_table_divides_the_rates_and_keeps_the_fixed_seconds():
    table = CostTable.of({**PHASES, "attack_at": {"tf32": {"fixed": 3.0, "rate": 8.0}}, "peak_fraction": 0.25})
    fast = table.scaled(2.0)
    assert fast.train == PhaseCost(fixed=1.0, rate=1.0) and fast.attack_at["tf32"] == PhaseCost(fixed=3.0, rate=4.0)
    assert fast.peak_fraction == 0.5
