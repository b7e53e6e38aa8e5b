"""The threat model an attack declares is what the harness hands it: a spy attack, registered through the plugin host
like a third-party package, records everything it is given on a full `run_attack`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
import torch
from _helpers.cli import run_cli

from reconbench import hookimpl, plugins
from reconbench.conformance import tiny_card
from reconbench.errors import IncompatibleError
from reconbench.interfaces import Attack, AttackOutput, AttackTarget, NoOptions, ThreatModel
from reconbench.records import TableRow
from reconbench.runs.execute import run_attack
from reconbench.runs.prepare import prepare
from reconbench.runs.spec import RunSpec
from reconbench.targets.training import build_model


@dataclass(frozen=True)
class SpyAttack(Attack):
    """Returns its start unchanged and keeps the target it was handed."""

    name: str = "spy_threat"
    description: str = "test-only: records what the harness hands it"
    needs: frozenset[str] = frozenset()
    threat: ThreatModel = ThreatModel()
    config_cls: type = NoOptions
    seen: ClassVar[list[AttackTarget]] = []

    def run(self, target: AttackTarget, x0: torch.Tensor, labels: torch.Tensor, config: Any, *,
            generator: torch.Generator, progress: Any = None) -> AttackOutput:
        SpyAttack.seen.append(target)
        return AttackOutput(candidates=x0.clone(), labels=labels.clone(), final_loss=0.0)


class _SpyPlugin:
    def __init__(self, attack: SpyAttack) -> None:
        self.attack = attack

    @hookimpl
    def register_attacks(self, register):  # type: ignore[no-untyped-def]
        register(self.attack)


@pytest.fixture
def spy():
    """Registers a spy with the given threat model and needs (a fresh plugin each time), yields what it saw."""
    host = plugins.host()
    names: list[str] = []

    def register(**fields: Any) -> SpyAttack:
        attack = SpyAttack(**fields)
        names.append(host.register(_SpyPlugin(attack), name=f"spy-plugin-{len(names)}-{attack.name}"))
        return attack

    SpyAttack.seen.clear()
    yield register
    for n in names:
        host.unregister(n)
    SpyAttack.seen.clear()


def _tensors(obj: Any, depth: int = 0) -> list[torch.Tensor]:
    """Every tensor reachable from an attack target: weights, buffers and knowledge fields."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, torch.nn.Module):
        return list(obj.state_dict().values())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type) and depth < 3:
        return [t for f in dataclasses.fields(obj) for t in _tensors(getattr(obj, f.name), depth + 1)]
    return []


def test_final_weights_only_is_handed_nothing_else(spy, tmp_path):
    card = tiny_card("binary")
    attack = spy(name="spy_final_only")
    assert attack.threat.final_weights_only
    result = run_attack(card, RunSpec(attack=attack.name), tmp_path / "run", quiet=True)
    assert result["threat_model"] == {"label": "θ", "initial_weights": False, "labels": False, "n": False,
                                      "all_but_one": False}
    assert result["target"]["p_over_dn"]["ratio"] == card.data["p_over_dn"]["ratio"]
    (target,) = SpyAttack.seen
    assert target.initial_model is None
    k = target.knowledge
    assert (k.class_counts, k.n, k.n_train, k.loss, k.weight_decay, k.mean_image) == (None,) * 6
    final = card.load_model(torch.float64).state_dict()
    assert all(torch.equal(target.model.state_dict()[key], final[key]) for key in final)
    # no tensor the attack can reach holds an initial weight (the first layer moved in training, so a match would
    # be a leak, not a coincidence)
    theta0 = [v for v in build_model(card.recipe, card.problem()).double().state_dict().values()]
    assert not any(t.shape == w.shape and torch.equal(t.double(), w) for t in _tensors(target) for w in theta0)


def test_initial_weights_are_the_trainers_start(spy, tmp_path):
    card = tiny_card("binary")
    attack = spy(name="spy_theta0", threat=ThreatModel(initial_weights=True))
    result = run_attack(card, RunSpec(attack=attack.name), tmp_path / "run", quiet=True)
    assert result["threat_model"]["label"] == "θ0+θ" and result["threat_model"]["initial_weights"]
    (target,) = SpyAttack.seen
    assert target.initial_model is not None
    start = build_model(card.recipe, card.problem()).to(card.dtype).double().state_dict()
    got = target.initial_model.state_dict()
    assert set(got) == set(start) and all(torch.equal(got[k], start[k]) for k in start)
    final = target.model.state_dict()
    assert not all(torch.equal(got[k], final[k]) for k in start), "the initial weights equal the released ones"
    assert target.knowledge.class_counts is None and target.knowledge.n is None  # θ0 only, not the labels


def test_n_without_labels(spy):
    card = tiny_card("multiclass")
    attack = spy(name="spy_n", threat=ThreatModel(n=True))
    _, target, _ = prepare(card, RunSpec(attack=attack.name))
    assert target.knowledge.n == sum(card.data["class_counts"]) and target.knowledge.class_counts is None
    assert target.initial_model is None


def test_labels_need_a_threat_model_that_reads_them(spy):
    card = tiny_card("binary")
    attack = spy(name="spy_sneaky", needs=frozenset({"class_balance"}))
    with pytest.raises(IncompatibleError, match=r"ThreatModel\(labels=True\)"):
        prepare(card, RunSpec(attack=attack.name))
    honest = spy(name="spy_honest", needs=frozenset({"class_balance"}), threat=ThreatModel(labels=True))
    _, target, _ = prepare(card, RunSpec(attack=honest.name))
    assert target.knowledge.class_counts == card.data["class_counts"]


def test_all_but_one_and_an_untyped_threat_are_refused_with_the_fix(spy):
    card = tiny_card("binary")
    informed = spy(name="spy_informed", threat=ThreatModel(all_but_one=True))
    with pytest.raises(IncompatibleError, match="all training points but one"):
        prepare(card, RunSpec(attack=informed.name))
    untyped = spy(name="spy_untyped", threat="final weights")
    with pytest.raises(IncompatibleError, match="declare a reconbench.interfaces.ThreatModel"):
        prepare(card, RunSpec(attack=untyped.name))


def test_labels_name_every_combination():
    assert ThreatModel().label == "θ"
    assert ThreatModel(initial_weights=True).label == "θ0+θ"
    assert ThreatModel(labels=True, n=True).label == "θ+labels"  # the labels tell n
    assert ThreatModel(initial_weights=True, n=True).label == "θ0+θ+n"
    assert ThreatModel(all_but_one=True).label == "θ+all but one"


def test_every_registered_attack_declares_a_threat_model_shown_by_list(capsys):
    code, output, _ = run_cli(["list", "attacks"], capsys)
    assert code == 0, output
    assert "threat model" in output.splitlines()[0]
    for name in plugins.names("attacks"):
        attack = plugins.get("attacks", name)
        assert isinstance(attack.threat, ThreatModel), name
        row = next(line for line in output.splitlines() if line.startswith(f"| {name} "))
        assert f"| {attack.threat.label}" in row


def test_threat_models_suite_loads_and_sweeps_the_law_axis():
    """The suite of the threat-model board: every attack registered, the random-features widths at p / (d n) =
    0.25 ... 8 on MNIST and 0.25 ... 4 on CIFAR-10, 5 seeds, the data prior in the null."""
    from reconbench.bench.cells import expand
    from reconbench.bench.suite import load_suite

    suite = load_suite("threat-models")
    cells = expand(suite)
    assert {c.attack.attack for c in cells} <= set(plugins.names("attacks"))
    assert {c.seed for c in cells} == {0, 1, 2, 3, 4}
    assert suite.protocol["prior_draws"] > 0
    d_n = {"mnist_test": 784 * 10, "npz:cifar10/cifar10_train_subset.npz": 3072 * 4}
    ratios = {"mnist_test": [0.25, 0.5, 1, 2, 4, 8], "npz:cifar10/cifar10_train_subset.npz": [0.25, 1, 4]}
    for dataset, dn in d_n.items():
        widths = {c.recipe.model["width"] for c in cells
                  if c.recipe.family == "random_features" and c.recipe.problem.dataset == dataset}
        assert sorted(w / dn for w in widths) == ratios[dataset]
    for c in cells:
        if c.recipe.family == "random_features":
            d = 784 if c.recipe.problem.dataset == "mnist_test" else 3072
            assert c.recipe.problem.n_per_class * 2 * d == d_n[c.recipe.problem.dataset]


def _row(attack: str, name: str) -> TableRow:
    return TableRow.written(target="t", attack=attack, attack_name=name, init="gaussian", cells=["c"], metrics={})


def test_board_rows_show_the_threat_model_only_where_an_attack_reads_theta0():
    from reconbench.leaderboard.readme import render_main_table
    from reconbench.leaderboard.tables import add_threat_models

    classic = [_row("haim_binary_kkt", "haim_binary_kkt"), _row("weight_rows", "weight_rows")]
    classic = add_threat_models(classic)   # the published boards' attacks: rows and README as before
    assert not any("threat_model" in r.to_dict() for r in classic)
    assert "threat model" not in render_main_table(classic, [])
    mixed = [_row("loo", "loo_ntk"), _row("haim_binary_kkt", "haim_binary_kkt"), _row("gone", "not_installed")]
    mixed = add_threat_models(mixed)
    assert [r.threat_model for r in mixed] == ["θ0+θ", "θ+labels", "not registered"]
    table = render_main_table(mixed, []).splitlines()
    assert "threat model" in table[0]
    assert "| θ0+θ " in table[2] and "| θ+labels " in table[3]


def test_a_card_without_p_over_dn_gets_the_same_numbers_from_its_parameter_count():
    """Cards written before p / (d n) was recorded: the fallback counts the same p, d and n as the model itself."""
    from reconbench.targets.cards import card_p_over_dn

    card = tiny_card()
    model = card.load_model()
    expected = {"p": sum(q.numel() for q in model.parameters()), "d": 64, "n": 6}
    recorded = card_p_over_dn(card.data)
    old = {k: v for k, v in card.data.items() if k != "p_over_dn"}
    assert recorded is not None and {k: recorded[k] for k in expected} == expected
    assert card_p_over_dn(old) == recorded
    assert recorded["ratio"] == expected["p"] / (64 * 6)
    assert card_p_over_dn({k: v for k, v in old.items() if k != "metrics"}) is None


def test_boards_with_theta0_rows_show_p_over_dn_and_group_rows_by_threat_model():
    from reconbench.leaderboard.readme import render_main_table
    from reconbench.leaderboard.tables import add_threat_models, order_rows
    from reconbench.records import MetricStat

    def row(attack: str, name: str, ratio: float, score: float) -> TableRow:
        return TableRow.written(target="t", attack=attack, attack_name=name, init="gaussian", cells=["c"],
                                metrics={"m": MetricStat.written(mean=score)}, p_over_dn=ratio)

    columns = [{"name": "m", "higher_is_better": True}]
    rows = [row("haim_binary_kkt", "haim_binary_kkt", 4.0, 9.0), row("loo", "loo_ntk", 0.25, 1.0),
            row("proj", "projection_law", 4.0, 5.0), row("loo", "loo_ntk", 4.0, 3.0)]
    ordered = order_rows(add_threat_models(rows), columns)
    # grouped by threat model (labels in order), best first inside each group, whatever the other groups score
    assert [(r.threat_model, r.metrics["m"].mean) for r in ordered] == \
        [("θ+labels", 9.0), ("θ0+θ", 3.0), ("θ0+θ", 1.0), ("θ0+θ+n", 5.0)]
    table = render_main_table(ordered, []).splitlines()
    assert "| p / (d n) " in table[0]
    assert [line.split("|")[4].strip() for line in table[2:]] == ["4", "4", "0.25", "4"]
    classic = add_threat_models([row("haim_binary_kkt", "haim_binary_kkt", 4.0, 1.0)])
    # no attack reads theta0: neither column, rows as on the boards published before
    assert "p_over_dn" not in classic[0].to_dict() and classic[0].p_over_dn is None
    assert "p / (d n)" not in render_main_table(classic, [])


def _cell(attack: str, family: str, width: int, seed: int, count: int, n: int = 10, d: int = 784) -> Any:
    from reconbench.records import CellRecord

    return CellRecord.from_dict({
        "cell_id": f"t@{width}--{attack}--gaussian--s{seed}", "status": "ok", "seed": seed,
        "outcome": {"status": "ok", "reason": "1 of 1 run(s) ok", "runs": {"ok": 1}},
        "runs": [{"run": 0, "final_loss": 0.0, "steps": 10, "stopped": "completed", "candidates_finite": True}],
        "target": {"name": "t", "recipe": {"family": family}, "n_train": n,
                   "p_over_dn": {"p": width, "d": d, "n": n, "ratio": width / (d * n)}},
        "attack": {"label": attack, "name": attack}, "init": {"label": "gaussian", "regime": "gaussian"},
        "selections": {"pool": {"summary": {"reconstructed_calibrated": count}}}})


def test_the_share_figure_reads_each_cells_count_over_n_at_its_p_over_dn(tmp_path):
    """The figure's points are the cells' own numbers: count / n at each cell's p / (d n), one panel per model family
    and (d, n), a family with a single p / (d n) (not swept) left out; the PNG is drawn."""
    from reconbench.bench.suite import default_columns
    from reconbench.leaderboard.figures import draw_share_vs_p_over_dn, share_points
    from reconbench.leaderboard.tables import Published

    recs = [_cell("proj", "random_features", 1960, 0, 0), _cell("proj", "random_features", 1960, 1, 1),
            _cell("proj", "random_features", 31360, 0, 10), _cell("proj", "random_features", 31360, 1, 9),
            _cell("loo", "random_features", 31360, 0, 4), _cell("proj", "mlp", 1786000, 0, 3)]
    pub = Published(plan=[], records={r.cell_id: r for r in recs}, not_run=[], stale=[])
    spec = default_columns()[0]
    assert spec.keys[0] == "reconstructed_calibrated"
    columns = [{"name": spec.name, "spec": spec}]
    points = share_points(pub, columns[0])
    assert points == {("random_features", 784, 10): {"proj": {0.25: [0.0, 0.1], 4.0: [1.0, 0.9]}, "loo": {4.0: [0.4]}}}
    info = draw_share_vs_p_over_dn(pub, columns, tmp_path / "share.png")
    assert info.file == "figures/share.png" and (tmp_path / "share.png").stat().st_size > 0
    none = Published(plan=[], records={recs[-1].cell_id: recs[-1]}, not_run=[], stale=[])
    assert draw_share_vs_p_over_dn(none, columns, tmp_path / "none.png").reason is not None
