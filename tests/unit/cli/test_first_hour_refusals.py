"""Refusals a newcomer met in a first hour with the docs: each is one line that names the problem and the fix, and
comes before any work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _helpers.audit_kit import digits_split, small_mlp
from _helpers.guards import trained_card
from safetensors.torch import save_file

from reconbench.cli import main

REPO = Path(__file__).resolve().parents[3]
TINY = ["--dataset", "digits", "--task", "multiclass", "--num-classes", "3", "--n-per-class", "2", "--widths", "8",
        "--steps", "5"]


@pytest.fixture(autouse=True)
def sandbox(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RECONBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RECONBENCH_DOWNLOAD", "0")


def refusal(args: list[str], capsys: Any) -> str:
    """The one line a refused command prints on stderr."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    out = capsys.readouterr()
    lines = [ln for ln in out.err.splitlines() if ln.strip()]
    assert exit_info.value.code not in (0, None), out.out[-300:]
    assert "Traceback" not in out.out + out.err, out.err[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error:"), out.err[-600:]
    assert "full trace" not in lines[0] and "internal error" not in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("value,written", [("metrics=ssim", '["ssim"]'), ("metrics=ssim,corr", '["ssim", "corr"]')])
def test_a_list_option_given_as_text_is_refused_with_how_to_write_the_list(value, written, capsys, no_work):
    line = refusal(["run", "--attack", "multiclass_kkt", *TINY, "--protocol-set", value], capsys)
    assert "protocol.metrics: expected a list" in line and f"e.g. {written}" in line


def test_a_suite_value_that_should_be_a_list_is_refused_with_the_list_it_means(tmp_path, capsys, no_work):
    text = (REPO / "reconbench" / "bench" / "suites" / "ci.toml").read_text()
    assert "\nseeds = [0, 1]\n" in text
    (tmp_path / "mine.toml").write_text(text.replace("\nseeds = [0, 1]\n", "\nseeds = 0\n"))
    line = refusal(["bench", "mine.toml", "--list"], capsys)
    assert "suite.seeds: expected a list" in line and "e.g. [0]" in line


@pytest.fixture
def card(tmp_path: Path) -> Path:
    return trained_card(tmp_path / "trained", TINY)


def test_export_into_a_folder_that_cannot_be_made_names_out(card, tmp_path, capsys):
    (tmp_path / "a-file").write_text("mine")
    line = refusal(["export", str(card), "--out", str(tmp_path / "a-file" / "owner")], capsys)
    assert "--out" in line and "writable folder" in line
    assert (tmp_path / "a-file").read_text() == "mine"


@pytest.fixture
def owner_files(tmp_path: Path) -> dict[str, str]:
    """A plain PyTorch network (untrained: the refusals come before any attack) and its digits split."""
    xtr, ytr, xho, yho = digits_split(3)
    torch.manual_seed(0)
    save_file(small_mlp((1, 8, 8), 1).double().state_dict(), str(tmp_path / "net.safetensors"))
    np.savez(tmp_path / "train.npz", images=xtr, labels=ytr)
    np.savez(tmp_path / "held.npz", images=xho, labels=yho)
    return {"weights": str(tmp_path / "net.safetensors"), "train": str(tmp_path / "train.npz"),
            "held": str(tmp_path / "held.npz")}


def audit_args(files: dict[str, str], family: str, out: str) -> list[str]:
    return ["audit", files["weights"], "--family", family, "--train", files["train"], "--held-out", files["held"],
            "--task", "binary", "--budget", "10", "--search-runs", "1", "--out", out, "-q"]


def test_audit_into_a_folder_that_cannot_be_made_is_refused_before_any_attack(owner_files, tmp_path, capsys,
                                                                                no_work):
    (tmp_path / "a-file").write_text("mine")
    line = refusal(audit_args(owner_files, "_helpers.audit_kit:small_mlp", str(tmp_path / "a-file" / "audit")),
                   capsys)
    assert "--out" in line and "writable folder" in line


def test_a_factory_module_that_is_not_importable_says_how_to_make_it_importable(owner_files, tmp_path, capsys,
                                                                                 no_work):
    line = refusal(audit_args(owner_files, "no_such_module_of_mine:make", str(tmp_path / "audit")), capsys)
    assert "no_such_module_of_mine" in line and "PYTHONPATH=." in line
    assert not (tmp_path / "audit").exists()


def test_the_readme_table_module_refuses_a_missing_file_in_one_line(tmp_path, capsys):
    from reconbench.runs.readme_table import main as readme_table

    with pytest.raises(SystemExit) as exit_info:
        readme_table([str(tmp_path / "missing.json")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert err.strip().startswith("error:") and "missing.json" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as exit_info:
        readme_table(["--help"])
    assert exit_info.value.code == 0 and "result.json" in capsys.readouterr().out


def test_trains_help_states_the_value_each_recipe_option_takes_when_not_given():
    """The defaults `train -h` states are those of the recipe a bare `train` resolves."""
    from reconbench.cli import load_commands
    from reconbench.cli.recipe_options import recipe_from_options

    train = load_commands().commands["train"]
    helps = {p.name: " ".join((getattr(p, "help", None) or "").split()) for p in train.params}
    recipe = recipe_from_options({})
    stated = {"task": recipe.problem.task, "n_per_class": recipe.problem.n_per_class, "family": recipe.family,
              "steps": recipe.train.steps, "lr": recipe.train.lr, "weight_decay": recipe.train.weight_decay,
              "schedule": recipe.train.schedule, "train_dtype": recipe.train.dtype, "train_seed": recipe.train.seed}
    for name, value in stated.items():
        assert f"default: {value})" in helps[name], (name, helps[name])
    assert "~/.cache/reconbench" in helps["cache"]


@pytest.mark.parametrize("extra", [["--verify"], ["--format", "csv"]])
def test_a_published_board_looked_for_outside_the_checkout_says_where_boards_are_read(extra, capsys, no_work):
    line = refusal(["leaderboard", "ci", *extra], capsys)   # the sandbox's working folder has no leaderboards/
    assert "leaderboards/ci" in line and "repository's root" in line and "--out" in line


@pytest.mark.parametrize("args", [["bench", "ci", "--list", "--out"], ["train", *TINY, "--out"],
                                  ["run", "--attack", "multiclass_kkt", *TINY, "--out"], ["evaluate"],
                                  ["site", "--no-images", "--out"]])
def test_a_folder_option_given_a_file_says_to_pass_a_folder_and_leaves_the_file(args, tmp_path, capsys, no_work):
    (tmp_path / "results").write_text("mine")
    line = refusal([*args, str(tmp_path / "results")], capsys)
    assert "is a file" in line and "pass the path of a folder" in line
    assert (tmp_path / "results").read_text() == "mine"


def test_an_option_for_a_strategy_that_takes_none_says_so(capsys, no_work):
    line = refusal(["run", "--attack", "multiclass_kkt", *TINY, "--search-set", "batch=4"], capsys)
    assert "unknown option 'batch'" in line and "takes no options" in line and "Known options: ." not in line


def test_a_model_list_option_refusal_shows_a_value_a_shell_passes_whole(capsys, no_work):
    import shlex

    from reconbench.cli.common import parse_assignments

    line = refusal(["run", "--attack", "multiclass_kkt", *TINY, "--model-set", "widths=8"], capsys)
    suggested = shlex.split(line.split("pass ", 1)[1])   # as a shell splits the suggestion
    assert suggested[0] == "--model-set" and len(suggested) == 2, suggested   # one argument after the option
    assert parse_assignments((suggested[1],), "--model-set") == {"widths": [1000, 1000]}   # mlp's default widths


@pytest.mark.parametrize("line,fix", [("n_per_class = 5", 'n_per_class = "5"'), ("lr = 0.5", 'lr = "0.5"')])
def test_a_quoted_number_in_a_suite_is_refused_with_the_number_unquoted(line, fix, tmp_path, capsys, no_work):
    text = (REPO / "reconbench" / "bench" / "suites" / "ci.toml").read_text()
    assert f"\n{line}\n" in text
    (tmp_path / "mine.toml").write_text(text.replace(f"\n{line}\n", f"\n{fix}\n", 1))
    refused = refusal(["bench", "mine.toml", "--list"], capsys)
    value = line.split(" = ")[1]
    assert f"got str '{value}'" in refused and f"write {value} without quotes" in refused


def test_text_where_a_number_belongs_says_what_to_write(capsys, no_work):
    refused = refusal(["run", "--attack", "multiclass_kkt", *TINY, "--set", "lr=fast"], capsys)
    assert "--set lr: expected a number" in refused and "write a number such as" in refused


def test_evaluate_on_an_audits_attack_folder_says_why_it_cannot_rescore_it(owner_files, tmp_path, capsys):
    from reconbench.cli import main as cli_main

    try:
        cli_main([*audit_args(owner_files, "_helpers.audit_kit:small_mlp", str(tmp_path / "audit")),
                  "--attack", "weight_rows"])
    except SystemExit as exc:
        assert not exc.code
    folder = tmp_path / "audit" / "attacks" / "weight_rows"
    assert (folder / "result.json").exists()
    line = refusal(["evaluate", str(folder)], capsys)
    assert "reconbench audit" in line and "audit.json" in line and "--model CARD_DIR" not in line


@pytest.mark.parametrize("attack", ["multiclass_kkt", "runkel_bilevel", "weight_rows"])
def test_list_verbose_shows_the_target_run_trains_for_an_attack(attack, capsys):
    from _helpers.cli import run_cli

    from reconbench import plugins

    code, out, err = run_cli(["list", "attacks", attack, "-v"], capsys)
    assert code == 0, err
    (line,) = [ln for ln in out.splitlines() if ln.startswith(f"{attack} default target")]
    recipe = plugins.attack(attack).default_recipe
    if not recipe:
        assert "reconbench train -h" in line
    for section in (recipe or {}).values():
        for key, value in section.items() if isinstance(section, dict) else []:
            assert f"{key} = {json.dumps(value)}" in line, (key, line)


@pytest.mark.parametrize("extra,named", [(["--task", "binary"], "--task"), (["--steps", "5"], "--steps"),
                                         (["--dataset", "mnist", "--widths", "4"], "--dataset, --widths")])
def test_recipe_options_beside_a_model_card_are_refused_not_ignored(extra, named, card, capsys, no_work):
    line = refusal(["run", "--attack", "multiclass_kkt", "--model", str(card), *extra], capsys)
    assert line.startswith(f"error: {named} describe") and "--model" in line


def test_a_model_cards_task_refusal_does_not_suggest_task(card, capsys, no_work):
    line = refusal(["run", "--attack", "haim_binary_kkt", "--model", str(card)], capsys)
    assert "this target is multiclass" in line and "--task" not in line and "multiclass_kkt" in line


def test_a_misspelled_data_set_in_a_suite_is_refused_when_the_suite_is_read(tmp_path, capsys, no_work):
    text = (REPO / "reconbench" / "bench" / "suites" / "ci.toml").read_text()
    assert '\ndataset = "digits"\n' in text
    (tmp_path / "mine.toml").write_text(text.replace('\ndataset = "digits"\n', '\ndataset = "digitz"\n', 1))
    line = refusal(["bench", "mine.toml", "--list"], capsys)   # --list reads the suite, nothing more
    assert "unknown dataset 'digitz'" in line and "Did you mean: digits?" in line
