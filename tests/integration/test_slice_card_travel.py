"""A target's card travels with its final training state (docs/slices.md, "Training that does not finish in one
slice"): the slice whose training ends writes the card's JSON beside the state, the pack carries it, the merge keeps
it beside the state and the ledger lists it with its sha256, and a later slice on a fresh machine restores the card
from it (the weights re-made from the state and checked) instead of rebuilding it; a card whose recorded weights do
not match is rebuilt. Also: a slice makes a finished target's card only where one of its cells fits after it, and
runs its cells right after it, before the next card, as the plan decides (``plan_slices``)."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers.slicekit import deterministic, digits_sizes
from test_slice_training import STEPS, SUITE, TickClock, cheap

from reconbench.bench import slice_executor
from reconbench.bench.cells import expand
from reconbench.bench.runner import run_suite
from reconbench.bench.slice_costs import CostModel, GroupRules, cell_work, plan_slices
from reconbench.bench.slice_executor import DeadlineExecutor
from reconbench.bench.slice_pack import LEDGER_FILE, import_states, ledger_cards, unpack
from reconbench.bench.suite import Suite, load_suite
from reconbench.cli.bench_slices import SlicePacker
from reconbench.records.cost_table import CostTable, PhaseCost
from reconbench.targets import training
from reconbench.targets.resumable import card_beside, train_pieces

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ENTRY = ("card.json", "weights.safetensors", "mean_image.safetensors")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def costly() -> CostModel:
    """Every cell priced far past any deadline: a slice with it only trains."""
    return CostModel.for_device("cpu", {"train": {"fixed": 1.0, "rate": 0.0}, "attack": {"fixed": 1e9, "rate": 0.0},
                                        "evaluate": {"fixed": 1.0, "rate": 0.0}})


def a_slice(suite: Suite, ex: DeadlineExecutor, name: str, tmp: Path, results: Path) -> Any:
    """Run one slice with ``ex`` on its own machine (device folder, cache), pack it, merge the pack into
    ``results``; the pack's manifest."""
    device = tmp / f"device{name}"
    report = run_suite(suite, device, cache=str(tmp / f"cache{name}"), quiet=True, executor=ex)
    manifest = SlicePacker(tmp / f"pack{name}", suite, device, ex, "cpu", None, 0.0, {}).write(report.ran,
                                                                                              complete=True)
    unpack(tmp / f"pack{name}", suite, results, {c.cell_id: c.key(suite, None) for c in expand(suite)})
    return manifest


@pytest.fixture(scope="module")
def travelled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Suite, Path, Path]]:
    """Two targets trained over two slices (slice 1 stops their stack midway; slice 2, on a fresh machine from the
    merged ledger, ends it and writes their cards, no cell fitting after), each merged: the suite, the results
    folder, and slice 2's cache."""
    tmp = tmp_path_factory.mktemp("travel")
    path = tmp / "train-pieces.toml"
    path.write_text(SUITE)
    suite = load_suite(str(path))
    results = tmp / "results"
    ex1 = DeadlineExecutor(30.0, cheap(), digits_sizes(suite), start=0.0, clock=TickClock(),
                           states=tmp / "cache1" / "training")
    first = a_slice(suite, ex1, "1", tmp, results)
    assert ex1.pieces and not any(p.finished for p in ex1.pieces)
    assert [e.card for e in first.training] == [None, None]   # a state not at its last step has no card
    import_states(results / LEDGER_FILE, tmp / "cache2" / "training")
    ex2 = DeadlineExecutor(1e6, costly(), digits_sizes(suite), start=0.0, clock=TickClock(),
                           states=tmp / "cache2" / "training")
    second = a_slice(suite, ex2, "2", tmp, results)
    assert ex2.pieces and all(p.finished and p.step == STEPS for p in ex2.pieces) and not second.cells
    assert all("card" not in r.phase for r in ex2.measured)   # the cards were made where training ended
    yield suite, results, tmp / "cache2"


def test_the_card_travels_beside_the_final_state_into_the_ledger(travelled):
    suite, results, cache2 = travelled
    ledger = json.loads((results / LEDGER_FILE).read_text())
    assert ledger["format"] == "reconbench-finished-cells/3"
    keys = {c.recipe.key() for c in expand(suite)}
    assert sorted(ledger["training"]) == sorted(keys) and ledger_cards(results / LEDGER_FILE) == keys
    for key, entry in ledger["training"].items():
        card = (cache2 / "targets" / key / "card.json").read_bytes()   # what the finishing slice wrote
        assert (results / "training" / f"{key}.card.json").read_bytes() == card
        assert entry["card"] == {"file": f"training/{key}.card.json", "sha256": sha(card)}
        assert json.loads(card)["metrics"]["training_pieces"] == 2


def restoring_slice(suite: Suite, results: Path, cache: Path, clock: Any = None) -> DeadlineExecutor:
    """A slice on a fresh machine (``cache``) from the ledger, every cell cheap: its executor, once it ran."""
    import_states(results / LEDGER_FILE, cache / "training")
    ex = DeadlineExecutor(1e6, cheap(), digits_sizes(suite), start=0.0, clock=clock or TickClock(),
                          states=cache / "training")
    report = run_suite(suite, cache.parent / f"out-{cache.name}", cache=str(cache), quiet=True, executor=ex)
    assert len(report.ran) == 4 and not report.failed
    return ex


def no_certificate(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the card's release metrics were computed again")

    monkeypatch.setattr(training, "certify", refuse)
    monkeypatch.setattr(training, "release_metrics", refuse)


def test_a_fresh_slice_restores_the_travelled_card_without_its_certificate(travelled, tmp_path, monkeypatch,
                                                                           capsys):
    suite, results, cache2 = travelled
    no_certificate(monkeypatch)
    ex = restoring_slice(suite, results, tmp_path / "cache3")
    assert sorted(r.phase for r in ex.measured if r.phase.startswith("card")) == ["card_restored"] * 2
    assert "restored from the card that travelled" in capsys.readouterr().err
    for key in {c.recipe.key() for c in expand(suite)}:
        for name in ENTRY:   # the cache entry the finishing slice wrote, byte for byte
            assert (tmp_path / "cache3" / "targets" / key / name).read_bytes() == \
                (cache2 / "targets" / key / name).read_bytes(), (key, name)


def test_a_travelled_card_whose_weights_do_not_match_is_rebuilt(travelled, tmp_path, capsys):
    suite, results, cache2 = travelled
    cache = tmp_path / "cache3"
    import_states(results / LEDGER_FILE, cache / "training")
    key = expand(suite)[0].recipe.key()
    beside = cache / "training" / f"{key}.card.json"
    card = json.loads(beside.read_text())
    right = card["weights"]["sha256"]
    card["weights"]["sha256"] = "0" * 64   # as another machine's rounding would make the weights
    beside.write_text(json.dumps(card))
    ex = restoring_slice(suite, results, cache)
    assert sorted(r.phase for r in ex.measured if r.phase.startswith("card")) == ["card", "card_restored"]
    err = capsys.readouterr().err
    assert f"card of target {key} not restored (the weights.safetensors re-made from its state" in err
    rebuilt = json.loads((cache / "targets" / key / "card.json").read_text())
    finished = json.loads((cache2 / "targets" / key / "card.json").read_text())
    assert rebuilt["weights"]["sha256"] == right and rebuilt["content_sha256"] == finished["content_sha256"]
    # the certificate, the pieces that trained it and every metric but the final loss: a rebuild, whose trainer took
    # no step, reads the last loss the state recorded (every 100 steps), the finishing slice the loss of its last step
    assert {k: v for k, v in deterministic(rebuilt["metrics"]).items() if k != "final_loss"} == \
        {k: v for k, v in deterministic(finished["metrics"]).items() if k != "final_loss"}
    assert rebuilt["metrics"]["final_loss"] == rebuilt["history"][-1]["loss"] > 0.0
    assert rebuilt["metrics"]["train_device"] == "cpu" and len(rebuilt["metrics"]["trained_in"]) == 2
    assert "certificate" in rebuilt["metrics"]
    for name in ENTRY[1:]:
        assert (cache / "targets" / key / name).read_bytes() == (cache2 / "targets" / key / name).read_bytes()
    # the rebuilt card is the one that travels on from here
    assert card_beside(cache / "training" / f"{key}.safetensors").read_bytes() == \
        (cache / "targets" / key / "card.json").read_bytes()


# -- a finished target's card only where a cell follows it: the executor and the plan ----------------------------
CARD, ATTACK = 10.0, 40.0   # a card rebuilt: 10 s; each cell: 1.25 x 40 + 2 = 52 s (a restore: the set-up, 1 s)


def card_table() -> CostTable:
    return CostTable(train=PhaseCost(fixed=1.0, rate=0.0), attack=PhaseCost(fixed=ATTACK, rate=0.0),
                     evaluate=PhaseCost(fixed=0.0, rate=0.0), card=PhaseCost(fixed=CARD, rate=0.0))


class Clock:
    """The slice's view of time: still, but for the seconds its cards and cells are priced at (added as each is
    made or runs)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def final_states(tmp_path_factory: pytest.TempPathFactory) -> tuple[Suite, Path]:
    """Both targets trained to their last step in one stack: their final states and, beside them, their cards."""
    tmp = tmp_path_factory.mktemp("final")
    path = tmp / "train-pieces.toml"
    path.write_text(SUITE)
    suite = load_suite(str(path))
    recipes = list({c.recipe.key(): c.recipe for c in expand(suite)}.values())
    pieces = train_pieces(recipes, [tmp / "cards" / r.key() for r in recipes], tmp / "states", seconds=1e9)
    assert all(p.finished for p in pieces)
    return suite, tmp / "states"


def decisions(suite: Suite, states: Path, tmp: Path, deadline: float, travelled: bool,
              monkeypatch: pytest.MonkeyPatch, cells_of: str = "--gaussian--"
              ) -> tuple[list[tuple[str, str]], list[tuple[str, str]], list[str]]:
    """The card each finished target gets at the start of a slice of ``deadline`` seconds running the cells whose id
    holds ``cells_of`` (default: one of each target, its gaussian one), by the executor and by the plan's first
    slice: (recipe key, "rebuilt", "restored" or "skipped") in the targets' order; and the cells the executor ran, in
    their order (the plan's first slice)."""
    cache = tmp / f"cache-{deadline:g}-{travelled}"
    shutil.copytree(states, cache / "training")
    if not travelled:   # as a ledger written before cards travelled leaves the cache
        for card in (cache / "training").glob("*.card.json"):
            card.unlink()
    clock = Clock()
    real_train, real_restore = slice_executor.train_pieces, slice_executor.restore_card

    def rebuild(*args: Any, **kwargs: Any) -> Any:
        out = real_train(*args, **kwargs)
        clock.now += CARD
        return out

    def restore(*args: Any, **kwargs: Any) -> Any:
        out = real_restore(*args, **kwargs)
        clock.now += card_table().train.fixed
        return out

    real_cell = slice_executor.run_cell
    model = CostModel(prior=card_table())

    def cell(*args: Any, **kwargs: Any) -> Any:
        out = real_cell(*args, **kwargs)
        clock.now += model.factor * ATTACK + model.extra   # the cell's estimate, as the plan spends it
        return out

    monkeypatch.setattr(slice_executor, "train_pieces", rebuild)
    monkeypatch.setattr(slice_executor, "restore_card", restore)
    monkeypatch.setattr(slice_executor, "run_cell", cell)
    sizes = digits_sizes(suite)
    only = [f"*{cells_of}*"]
    ex = DeadlineExecutor(deadline, CostModel(prior=card_table()), sizes, start=0.0, clock=clock,
                          states=cache / "training")
    # the prices stay the table's, as the plan's: a cell's real seconds (a fraction of one) would teach the model
    # that the next cell takes next to nothing
    monkeypatch.setattr(ex.model, "observe", lambda *args, **kwargs: None)
    report = run_suite(suite, tmp / f"out-{deadline:g}-{travelled}", only=only, cache=str(cache), quiet=True,
                       executor=ex)
    cells = [c for c in expand(suite) if cells_of in c.cell_id]
    first_of = {c.cell_id: c.recipe.key() for c in cells}
    made = {first_of[r.cell]: {"card": "rebuilt", "card_restored": "restored"}[r.phase] for r in ex.measured
            if r.phase.startswith("card")}
    waited = {first_of[d.cell_id] for d in ex.deferred if "its target's card was not" in d.note}
    by_executor = [(k, made.get(k, "skipped" if k in waited else "?")) for k in dict.fromkeys(first_of.values())]

    works = [cell_work(c, sizes[c.recipe.key()], pieces=True, dtype=suite.dtype, device="cpu") for c in cells]
    keys = frozenset(first_of.values())
    plan = plan_slices(works, CostModel(prior=card_table()), deadline, progress=dict.fromkeys(keys, 1.0),
                       rules=GroupRules(travelled_cards=keys if travelled else frozenset()))
    assert not plan.unfit
    how = "restored" if travelled else "rebuilt"
    assert plan.cards[0] + plan.cards_restored[0] == sum(1 for _, m in by_executor if m != "skipped")
    assert report.ran == plan.slices[0]   # the cells that ran, in their order: each right after its card
    by_plan = [(k, "skipped" if k in plan.cards_skipped[0] else how) for k in dict.fromkeys(first_of.values())]
    return by_executor, by_plan, report.ran


def test_a_card_is_rebuilt_only_where_a_cell_of_its_target_fits_after_it_as_the_plan_decides(
        final_states, tmp_path, monkeypatch):
    """Slices of 70 s: the first target's card (10 s) and its cell (52 s) fit (62 s); the second's card would leave
    no room for its cell: it is skipped, by the executor and by the plan. In slices of 200 s both cards are rebuilt.
    Restored (1 s each), the first card and its cell take 53 s and the second card is not restored either: its cell
    would not follow it (106 s), and a card is made only where its cells run next."""
    suite, states = final_states
    a, b = dict.fromkeys(c.recipe.key() for c in expand(suite))
    tight, tight_plan, _ = decisions(suite, states, tmp_path, 70.0, False, monkeypatch)
    assert tight == tight_plan == [(a, "rebuilt"), (b, "skipped")]
    roomy, roomy_plan, _ = decisions(suite, states, tmp_path, 200.0, False, monkeypatch)
    assert roomy == roomy_plan == [(a, "rebuilt"), (b, "rebuilt")]
    no_certificate(monkeypatch)
    restored, restored_plan, _ = decisions(suite, states, tmp_path, 70.0, True, monkeypatch)
    assert restored == restored_plan == [(a, "restored"), (b, "skipped")]


def test_a_card_s_cells_run_right_after_it_before_the_next_card(final_states, tmp_path, monkeypatch):
    """The same targets with their cells interleaved (a's gaussian, b's gaussian, a's uniform, b's uniform) and
    their cards travelled, slices of 200 s: a's card (1 s), then both of a's cells (105 s), then b's card and its
    gaussian cell (158 s); b's uniform cell would pass 200 s. Restoring both cards first would run a's gaussian, b's
    gaussian and a's uniform cells instead. In slices of 150 s b's card is not restored: neither of its cells would
    follow it (158 s)."""
    suite, states = final_states
    interleaved = tmp_path / "interleaved.toml"
    grid = '[[grid]]\ntargets = ["a", "b"]\nattacks = ["haim_binary_kkt"]\ninits = ["gaussian", "uniform"]\n'
    assert grid in SUITE
    interleaved.write_text(SUITE.replace(grid, grid.replace('["gaussian", "uniform"]', '["gaussian"]')
                                         + "\n" + grid.replace('["gaussian", "uniform"]', '["uniform"]')))
    mixed = load_suite(str(interleaved))
    assert [c.cell_id.split("--")[0] for c in expand(mixed)] == ["a", "b", "a", "b"]
    a, b = dict.fromkeys(c.recipe.key() for c in expand(mixed))
    no_certificate(monkeypatch)
    roomy, roomy_plan, ran = decisions(mixed, states, tmp_path, 200.0, True, monkeypatch, cells_of="--s0")
    assert roomy == roomy_plan == [(a, "restored"), (b, "restored")]
    assert ran == ["a--haim_binary_kkt--gaussian--s0", "a--haim_binary_kkt--uniform--s0",
                   "b--haim_binary_kkt--gaussian--s0"]
    tight, tight_plan, ran = decisions(mixed, states, tmp_path, 150.0, True, monkeypatch, cells_of="--s0")
    assert tight == tight_plan == [(a, "restored"), (b, "skipped")]
    assert ran == ["a--haim_binary_kkt--gaussian--s0", "a--haim_binary_kkt--uniform--s0"]


def test_the_plan_learns_from_the_ledger_which_cards_travelled(travelled, tmp_path, capsys):
    """``--plan --finished``: with the ledger's cards each target's card is restored first (the table's training
    set-up, 1 s), without them (as a ledger written before cards travelled) rebuilt (its card price, 100 s): the
    first slice's estimate differs by 2 x 99 s."""
    from _helpers.cli import run_cli

    suite, results, _ = travelled
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"format": "reconbench-cost-table/1", "train": {"fixed": 1.0, "rate": 0.0},
                                 "attack": {"fixed": 1.0, "rate": 0.0}, "evaluate": {"fixed": 1.0, "rate": 0.0},
                                 "card": {"fixed": 100.0, "rate": 0.0}}))
    old = json.loads((results / LEDGER_FILE).read_text())
    for entry in old["training"].values():
        entry.pop("card")
    (tmp_path / "old.json").write_text(json.dumps(old))

    def first_slice(ledger: Path, says: str) -> float:
        code, out, err = run_cli(["bench", str(suite.path), "--plan", "--deadline", "1000", "--costs", str(costs),
                                  "--finished", str(ledger), "--out", str(tmp_path / "none")], capsys)
        assert code == 0, out + err
        row = next(line for line in out.splitlines() if line.startswith("|       1 |"))
        assert says in row.split("|")[4]   # the training column names what the slice does with the cards
        return float(row.split("|")[3])

    rebuilt = first_slice(tmp_path / "old.json", "2 card(s) rebuilt 200s")
    assert rebuilt - first_slice(results / LEDGER_FILE, "2 card(s) restored 2s") == pytest.approx(2 * 99.0, abs=1)


def test_a_card_that_does_not_match_its_manifest_or_ledger_is_refused(travelled, tmp_path):
    """A pack whose manifest records another sha256 for a travelling card is refused before anything is merged; a
    ledger whose card is missing beside its state is refused by ``--finished`` in one line."""
    from reconbench.bench.slice_pack import PackError

    suite, results, _ = travelled
    pack = tmp_path / "pack"
    shutil.copytree(results.parent / "pack2", pack)
    manifest = json.loads((pack / "manifest.json").read_text())
    manifest["training"][0]["card"]["sha256"] = "0" * 64
    (pack / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(PackError, match="card beside training state .* does not match the sha256") as err:
        unpack(pack, suite, tmp_path / "merged", {c.cell_id: c.key(suite, None) for c in expand(suite)})
    assert "\n" not in str(err.value) and not (tmp_path / "merged" / "training").exists()

    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    next(iter((copy / "training").glob("*.card.json"))).unlink()
    with pytest.raises(PackError, match=r"card\.json is missing or does not match the sha256"):
        import_states(copy / LEDGER_FILE, tmp_path / "cache" / "training")


def test_the_command_line_slice_restores_the_cards_the_ledger_carries(travelled, tmp_path, monkeypatch, capsys):
    """``reconbench bench SUITE --deadline ... --pack ... --finished LEDGER`` on a fresh cache: the ledger's cards are
    copied beside the states and restored, the certificate never computed; every cell runs and the merge is
    complete."""
    from _helpers.cli import run_cli

    suite, results, _ = travelled
    no_certificate(monkeypatch)
    merged = tmp_path / "merged"
    shutil.copytree(results, merged)
    code, out, err = run_cli(["bench", str(suite.path), "--device", "cpu", "--deadline", "3000", "--pack",
                              str(tmp_path / "pack"), "--out", str(tmp_path / "device"), "--cache",
                              str(tmp_path / "cache"), "--finished", str(merged / LEDGER_FILE), "-q"], capsys)
    assert code == 0, out + err
    assert err.count("restored from the card that travelled") == 2 and "rebuilt" not in err
    manifest = json.loads((tmp_path / "pack" / "manifest.json").read_text())
    assert sorted(r["phase"] for r in manifest["measured"] if r["phase"].startswith("card")) == ["card_restored"] * 2
    assert manifest["training"] == []   # restored states are not packed again: the results folder keeps them
    code, out, _ = run_cli(["bench", str(suite.path), "--unpack", str(tmp_path / "pack"), "--out", str(merged)],
                           capsys)
    assert code == 0 and "every cell of suite train-pieces" in out
    assert not list((merged / "training").glob("*"))   # every cell finished: states and cards removed
