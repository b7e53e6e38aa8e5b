"""Suite files: parsing, errors that name the key and its line, expansion into cells, the shipped suites."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from _helpers.suitekit import toy_targets

from reconbench.bench.cells import expand, select
from reconbench.bench.suite import SuiteError, default_columns, find_suite, load_suite
from reconbench.bench.toml_lines import KeyLines

REPO = Path(__file__).resolve().parents[3]

BASE = """\
[suite]
name = "t"
seeds = [0, 1]
search_runs = 2

""" + toy_targets(10) + """
[attacks.toy_identity]
config = { steps = 1 }

[inits.gaussian]
config = { scale = 0.01 }

[[grid]]
targets = ["bin", "mc"]
attacks = ["toy_identity"]
"""


def write(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    """1-based line of the n-th line containing needle (computed from the text, independently of KeyLines)."""
    hits = [i for i, line in enumerate(text.splitlines(), start=1) if needle in line]
    return hits[occurrence - 1]


# -- the key locator -----------------------------------------------------------------------------------------
def test_key_lines_tables_arrays_inline_and_multiline():
    text = textwrap.dedent("""\
        # comment with [fake.header] and key = 1
        top = 1
        [a]
        s = "x = 2 # not a comment"
        m = \"\"\"multi
        fake = 3\"\"\"
        inner = { p = 1, q = { r = 2 } }
        arr = [
          1,
          2,
        ]
        [[blocks]]
        name = "first"
        [[blocks]]
        name = "second"
        list = [{ k = 1 },
                { k = 2 }]
        [b."quoted.key"]
        d.e = 5
        """)
    kl = KeyLines(text)
    assert kl.line(("top",)) == 2
    assert kl.line(("a", "s")) == 4
    assert kl.line(("a", "fake")) == kl.line(("a",)) == 3  # inside a string: not a key; falls back to the table
    assert kl.line(("a", "m")) == 5
    assert kl.line(("a", "inner", "q", "r")) == 7
    assert kl.line(("a", "arr", 1)) == 10
    assert kl.line(("blocks", 0, "name")) == 13
    assert kl.line(("blocks", 1, "name")) == 15
    assert kl.line(("blocks", 1, "list", 1, "k")) == 17
    assert kl.line(("b", "quoted.key", "d", "e")) == 19
    assert kl.line(("nothing",)) is None


# -- loading and validation ----------------------------------------------------------------------------------
def test_base_suite_expands_to_the_product(tmp_path, toy_attack_registered):
    suite = load_suite(write(tmp_path, BASE))
    cells = expand(suite)
    assert len(cells) == 2 * 1 * 1 * 2  # targets x attacks x inits x seeds
    assert {c.cell_id for c in cells} == {f"{t}--toy_identity--gaussian--s{s}" for t in ("bin", "mc") for s in (0, 1)}
    assert suite.targets["mc"].recipe.problem.num_classes == 3
    assert suite.targets["bin"].recipe.model["widths"] == [8]
    assert suite.leaderboard.columns == default_columns()
    spec = cells[0].run_spec(suite)
    assert spec.search_runs == 2 and spec.attack_config == {"steps": 1} and spec.init_config == {"scale": 0.01}
    assert len(select(cells, ["mc--*"])) == 2 and len(select(cells, ["*s1", "bin--*"])) == 3


@pytest.mark.parametrize(
    "edit, needle, expect",
    [
        # (replace, with), the text on the offending line, words the message must contain
        (
            ("steps = 10\n", "steps = 10\nstepz = 3\n"),
            "stepz = 3",
            ["targets.bin.stepz", "unknown key 'stepz'", "steps"],
        ),
        (
            ("n_per_class = 3", 'n_per_class = "three"'),
            'n_per_class = "three"',
            ["targets.bin.n_per_class", "integer"],
        ),
        (("search_runs = 2", "search_runs = 0"), "search_runs = 0", ["suite.search_runs", "must be >= 1"]),
        (("[suite]\n", "[suite]\ncolour = 1\n"), "colour = 1", ["suite.colour", "unknown key"]),
        (
            ('attacks = ["toy_identity"]', 'attacks = ["toy_identity", "toy_identiy"]'),
            'attacks = ["toy_identity", "toy',
            ["grid[0].attacks[1]", "toy_identiy", "Did you mean: toy_identity"],
        ),
        (
            ("config = { steps = 1 }", "config = { stepss = 1 }"),
            "stepss",
            ["attacks.toy_identity.config.stepss", "Did you mean: steps"],
        ),
        (
            ("config = { scale = 0.01 }", 'config = { scale = "big" }'),
            'scale = "big"',
            ["inits.gaussian.config.scale", "number"],
        ),
        (
            ("widths = [8]\nsteps = 10\n\n[targets.mc]", 'widths = [8, "x"]\nsteps = 10\n\n[targets.mc]'),
            'widths = [8, "x"]',
            ["targets.bin.widths", "integer"],
        ),
        (
            ("[targets.bin]\n", '[targets.bin]\nfamily = "mlpp"\n'),
            'family = "mlpp"',
            ["targets.bin.family", "mlp"],
        ),
    ],
)
def test_bad_keys_name_the_key_and_line(tmp_path, toy_attack_registered, edit, needle, expect):
    text = BASE.replace(*edit, 1)
    assert text != BASE
    path = write(tmp_path, text)
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    msg = str(info.value)
    assert f"{path}:{line_of(text, needle)}:" in msg, msg
    for word in expect:
        assert word in msg, (word, msg)


def test_toml_syntax_error_names_the_line(tmp_path):
    path = write(tmp_path, BASE.replace("steps = 10\n", "steps = = 10\n", 1))
    with pytest.raises(SuiteError, match=r"not valid TOML.*line 11"):
        load_suite(path)


def test_unregistered_attack_is_a_warning_unless_strict(tmp_path, toy_attack_registered):
    text = BASE + "\n[attacks.not_yet]\nconfig = { anything = 1 }\n"
    path = write(tmp_path, text)
    suite = load_suite(path)
    assert len(suite.warnings) == 1 and "not_yet" in suite.warnings[0]
    assert f"{path}:{line_of(text, '[attacks.not_yet]')}" in suite.warnings[0]
    with pytest.raises(SuiteError, match=r"unknown attack 'not_yet'"):
        load_suite(path, strict=True)


def test_references_and_empty_suites(tmp_path, toy_attack_registered):
    text = BASE.replace('targets = ["bin", "mc"]', 'targets = ["bin", "nope"]')
    path = write(tmp_path, text)
    with pytest.raises(SuiteError, match=rf"{path}:{line_of(text, 'nope')}: grid\[0\].targets\[1\]: no target 'nope'"):
        load_suite(path)
    text = BASE[: BASE.index("[[grid]]")]
    with pytest.raises(SuiteError, match="runs nothing"):
        load_suite(write(tmp_path, text))


def test_comparisons_derive_targets_and_reuse_equal_ones(tmp_path, toy_attack_registered):
    text = BASE + textwrap.dedent("""
        [comparisons.wd]
        target = "bin"
        axis = "weight_decay"
        values = [0.0, 1e-3]
        attacks = ["toy_identity"]
        seeds = [0]

        [comparisons.k]
        target = "mc"
        axis = "num_classes"
        variants = [{ num_classes = 2, n_per_class = 3 }, { num_classes = 3, n_per_class = 2 }]
        attacks = ["toy_identity"]
        seeds = [0]
        """)
    suite = load_suite(write(tmp_path, text))
    wd, k = suite.comparisons
    # weight_decay = 0.0 is what `bin` already has (the default), so the base target is reused
    assert [v.target for v in wd.variants] == ["bin", "bin@weight_decay=0.001"]
    assert suite.targets["bin@weight_decay=0.001"].recipe.train.weight_decay == 1e-3
    assert [v.target for v in k.variants] == ["mc@num_classes=2,n_per_class=3", "mc"]
    derived = suite.targets["mc@num_classes=2,n_per_class=3"].recipe.problem
    assert (derived.num_classes, derived.n_per_class) == (2, 3)
    cells = expand(suite)
    # grid: 4 cells; comparisons add one new cell each (the base variants are grid cells, shared)
    assert len(cells) == 6
    shared = next(c for c in cells if c.cell_id == "bin--toy_identity--gaussian--s0")
    assert set(shared.groups) == {"grid", "comparison:wd"}
    bad = text.replace("variants = [{ num_classes = 2, n_per_class = 3 }", "variants = [{ n_per_class = 3 }")
    path = write(tmp_path, bad, "bad.toml")
    with pytest.raises(
        SuiteError,
        match=rf"{path}:{line_of(bad, 'variants = [')}: comparisons.k.variants\[0\]: "
        "this variant does not set the axis key 'num_classes'",
    ):
        load_suite(path)


def test_cell_key_changes_with_what_determines_the_numbers(tmp_path, toy_attack_registered):
    suite = load_suite(write(tmp_path, BASE))
    changed = load_suite(write(tmp_path, BASE.replace("config = { steps = 1 }", "config = { steps = 2 }"), "b.toml"))
    a, b = expand(suite)[0], expand(changed)[0]
    assert a.cell_id == b.cell_id and a.key(suite) != b.key(changed)
    assert a.key(suite) == a.key(suite, "float64") != a.key(suite, "float32")


def test_find_suite_by_name_and_close_matches(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert find_suite("ci") == REPO / "reconbench" / "bench" / "suites" / "ci.toml"   # shipped with the package
    with pytest.raises(SuiteError, match="Did you mean: ci"):
        find_suite("cii")


# -- the shipped suites --------------------------------------------------------------------------------------
ATTACKS = {"haim_binary_kkt", "multiclass_kkt", "general_loss_wd", "runkel_bilevel"}
INITS = {"gaussian", "uniform", "partition", "ground_truth"}
BASELINES = {"weight_rows", "init_only", "data_prior"}


@pytest.mark.parametrize("name", ["ci", "cpu-mini", "paper"])
def test_shipped_suites_load(name):
    suite = load_suite(name)
    cells = expand(suite)
    assert cells and suite.name == name
    attacks = {c.attack.attack for c in cells}
    assert ATTACKS <= attacks <= ATTACKS | BASELINES
    if name != "paper":  # the published boards show the baselines as rows
        assert BASELINES <= attacks
    assert INITS <= {c.init.regime for c in cells}
    for c in cells:  # KKT attacks on the papers' homogeneous MLP; the bilevel attack on Runkel's 1-hidden MLP
        if c.attack.attack in BASELINES:
            continue
        if c.attack.attack == "runkel_bilevel":
            assert c.recipe.family == "mlp_bias" and len(c.recipe.model["widths"]) == 1
        else:
            assert c.recipe.family == "mlp"


def test_ci_suite_is_tiny_and_covers_every_init_on_digits():
    suite = load_suite("ci")
    cells = expand(suite)
    assert {c.recipe.problem.dataset for c in cells} == {"digits"}
    assert INITS | {"mixture"} <= {c.init.regime for c in cells}
    for attack in ATTACKS:  # every attack under every init regime
        assert {c.init.regime for c in cells if c.attack.attack == attack} == INITS | {"mixture"}
    assert all(max(c.recipe.model["widths"]) <= 100 and c.recipe.train.steps <= 1000 for c in cells)


def test_cpu_mini_covers_the_issue():
    suite = load_suite("cpu-mini")
    cells = expand(suite)
    datasets = {"mnist_test", "npz:cifar10/cifar10_train_subset.npz"}
    for attack in ATTACKS:
        for ds in datasets:
            inits = {c.init.regime for c in cells if c.attack.attack == attack and c.recipe.problem.dataset == ds}
            assert INITS <= inits, (attack, ds)
    assert all(c.recipe.model["widths"] in ([1000, 1000], [1000]) for c in cells)
    comps = {c.name: c for c in suite.comparisons}
    assert [v.value for v in comps["weight_decay"].variants] == [0.0, 5e-4, 2e-3]
    ns = {suite.targets[v.target].recipe.problem.n_per_class * v.value for v in comps["num_classes"].variants}
    assert ns == {20}  # fixed n
    assert any(c.init.regime == "mixture" for c in cells)


def test_paper_suite_has_the_published_sizes():
    suite = load_suite("paper")
    # the precision policy: float32 attacks with TF32 products on the GPU, targets trained in float32 by the
    # closed-form loop and checked by the regime gate
    assert suite.device == "cuda" and suite.dtype == "float32" and suite.max_learned_ratio == 0.1
    assert all(a.config.get("tf32") for a in suite.attacks.values() if a.dtype is None and "steps" in a.config)
    assert {(e.recipe.train.dtype, e.recipe.train.float32_trainer) for e in suite.targets.values()} == {
        ("float32", "closed_form")}
    t = suite.targets
    assert t["cifar-binary"].recipe.problem.n_per_class == 250 and t["cifar-multiclass"].recipe.problem.n_per_class == 50
    assert all(e.recipe.train.steps == 1_000_000 for e in t.values())
    assert suite.attacks["haim_binary_kkt"].config["steps"] == 50_000
    assert all(c.attack.candidates is None for c in expand(suite))  # m = 2n


def test_protocol_tables_are_flattened_to_dotted_options(tmp_path, toy_attack_registered):
    text = BASE.replace("[targets.bin]", "[protocol]\ngood_threshold = 0.5\nssim = { window_size = 5 }\n\n[targets.bin]")
    suite = load_suite(write(tmp_path, text))
    assert suite.protocol == {"good_threshold": 0.5, "ssim.window_size": 5}
    assert expand(suite)[0].run_spec(suite).protocol == suite.protocol


def test_protocol_errors_from_the_evaluation_name_the_line(tmp_path, toy_attack_registered, monkeypatch):
    import reconbench.evaluation as evaluation
    from reconbench.errors import ReconbenchError

    def resolve_protocol(values, family):  # stands in for the protocol's own validation
        for k in values:
            if k not in {"good_threshold", "ssim.window_size"}:
                raise ReconbenchError(f"protocol: unknown option {k!r}")

    monkeypatch.setattr(evaluation, "resolve_protocol", resolve_protocol, raising=False)
    text = BASE.replace("[targets.bin]", "[protocol]\ngood_threshold = 0.5\nssim = { windw = 5 }\n\n[targets.bin]")
    path = write(tmp_path, text)
    with pytest.raises(SuiteError, match=rf"{path}:{line_of(text, 'windw')}: protocol.ssim.windw: .*'ssim.windw'"):
        load_suite(path)


def test_seed_targets_retrains_each_seed_and_the_gate_is_read():
    suite = load_suite("ci")
    assert suite.seed_targets and suite.max_learned_ratio == 0.1 and suite.max_stationarity_ratio is None
    cells = [c for c in expand(suite) if c.target == "digits-binary" and c.attack.attack == "haim_binary_kkt"
             and c.init.label == "gaussian"]
    assert sorted(c.seed for c in cells) == [0, 1]
    by_seed = {c.seed: c.recipe for c in cells}
    base = suite.targets["digits-binary"].recipe
    assert by_seed[0] == base and by_seed[1].train.seed == base.train.seed + 1
    assert by_seed[0].key() != by_seed[1].key()  # a separate target per seed
    # a shuffled-order problem draws its own training images per seed: the members differ, the task does not
    assert base.problem.order == "shuffled" and by_seed[1].problem.order_seed == base.problem.order_seed + 1
    from reconbench.targets.problems import build_problem
    first, second = (build_problem(by_seed[k].problem) for k in (0, 1))
    assert set(first.train_indices.tolist()) != set(second.train_indices.tolist())
    assert sorted(first.train_labels.tolist()) == sorted(second.train_labels.tolist())


def test_the_schema_checker_types_known_and_required_keys(tmp_path):
    """One checker holds every kind of table to its declaration: unknown keys, wrong types, missing keys."""
    from reconbench.bench.suite.schema import COMPARISON_TABLE, GRID_TABLE, Checker

    text = '[[grid]]\ntargets = ["a"]\nseeds = "x"\n'
    chk = Checker(tmp_path / "s.toml", text)
    with pytest.raises(SuiteError, match=r"s\.toml:3: grid\[0\]\.seeds: "):
        chk.section({"targets": ["a"], "attacks": ["b"], "seeds": "x"}, GRID_TABLE, ("grid", 0))
    with pytest.raises(SuiteError, match=r"grid\[0\]: a \[\[grid\]\] block needs `attacks`"):
        chk.section({"targets": ["a"]}, GRID_TABLE, ("grid", 0))
    with pytest.raises(SuiteError, match=r"unknown key 'targetz'"):
        chk.section({"targetz": ["a"]}, GRID_TABLE, ("grid", 0))
    assert chk.section({"target": "a", "axis": "lr", "attacks": "*", "values": [1, 2]}, COMPARISON_TABLE,
                       ("comparisons", "c")) == {"target": "a", "axis": "lr", "attacks": "*", "values": [1, 2]}


@pytest.mark.parametrize("extra, expect", [
    ('[comparisons.c]\ntarget = "bin"\nattacks = ["toy_identity"]\nvalues = [1]\n', "a comparison needs `axis`"),
    ('[leaderboard]\ncolumns = [{ name = "n", key = "k" }]\n', "a column needs `higher_is_better`"),
    ('[comparisons.c]\ntitle = 3\ntarget = "bin"\naxis = "lr"\nattacks = ["toy_identity"]\nvalues = [1]\n',
     "comparisons.c.title"),
])
def test_missing_and_mistyped_keys_of_other_tables(tmp_path, toy_attack_registered, extra, expect):
    with pytest.raises(SuiteError, match=expect.replace("[", r"\[").replace(".", r"\.")):
        load_suite(write(tmp_path, BASE + "\n" + extra))
