"""Every code block of CONTRIBUTING.md is run by a test or taken from an example package that a test runs.

Each block is listed in ``CHECKS`` with what checks it, so a new block without a check fails here:

* a ``pyproject.toml`` block is a part of the example's ``pyproject.toml`` (the same keys and values);
* a Python block abridged from an example's source (``...`` stands for what it leaves out, comments and annotations
  aside) holds only statements the example holds, in the example's order, and the same signatures;
* a test snippet is, line by line, in the example's own test, which ``tests/unit/plugins/test_example_plugin.py`` runs;
* a suite block is appended to the suite it extends and read strictly, with the example registered;
* a shell block's ``reconbench`` commands run (in a temporary folder, the example registered), each showing what its
  comment says it shows; ``pip install -e PATH`` names an example package folder.
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomllib
from _helpers.cli import run_cli
from _helpers.examples import EXAMPLES, example_registered

from reconbench.bench.cells import expand
from reconbench.bench.suite import Suite, find_suite, load_suite

ROOT = EXAMPLES.parent
NAIVE = EXAMPLES / "reconbench-naive-attack"
LOWRANK = EXAMPLES / "reconbench-lowrank-defense"


@dataclass(frozen=True)
class Block:
    language: str
    text: str
    line: int   # of the opening fence in CONTRIBUTING.md

    def __str__(self) -> str:
        return f"CONTRIBUTING.md:{self.line} ({self.language})"


def blocks(markdown: str) -> list[Block]:
    """The fenced code blocks of a Markdown text (indented fences included, their indentation removed)."""
    out: list[Block] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        opening = re.match(r"^(\s*)```(\w+)\s*$", lines[i])
        if opening is None:
            i += 1
            continue
        indent, start = len(opening.group(1)), i
        i += 1
        body = []
        while not lines[i].strip().startswith("```"):
            body.append(lines[i][indent:])
            i += 1
        out.append(Block(opening.group(2), "\n".join(body) + "\n", start + 1))
        i += 1
    return out


CONTRIBUTING = blocks((ROOT / "CONTRIBUTING.md").read_text())


# -- part of a file ------------------------------------------------------------------------------------------------
def missing_from(part: Any, whole: Any, where: str = "") -> list[str]:
    """The keys of ``part`` (a TOML table) that ``whole`` lacks or holds with another value."""
    if isinstance(part, dict) and isinstance(whole, dict):
        return [m for k, v in part.items() for m in (missing_from(v, whole[k], f"{where}.{k}") if k in whole
                                                      else [f"{where}.{k}"])]
    return [] if part == whole else [f"{where} = {part!r} (the file: {whole!r})"]


def _plain(node: ast.AST) -> str:
    return ast.dump(node, annotate_fields=False)


def _is_ellipsis(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and node.value.value is Ellipsis


def _arguments(fn: ast.FunctionDef) -> list[str]:
    a = fn.args
    return ([x.arg for x in a.posonlyargs + a.args] + [f"*{a.vararg.arg}" if a.vararg else "*"]
            + [x.arg for x in a.kwonlyargs] + [f"**{a.kwarg.arg}" if a.kwarg else ""])


def abridged_problems(snippet: list[ast.stmt], source: list[ast.stmt], where: str) -> list[str]:
    """What ``snippet`` shows that ``source`` does not hold: a class or function that is not there (or has other
    bases, decorators or argument names), a statement that is not there or comes in another order."""
    problems: list[str] = []
    at = 0
    for node in snippet:
        if _is_ellipsis(node):
            continue
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            match = next((i for i, s in enumerate(source) if i >= at and type(s) is type(node)
                          and s.name == node.name), None)
            if match is None:
                problems.append(f"{where}: {node.name} is not there (or not in this order)")
                continue
            theirs = source[match]
            assert isinstance(theirs, ast.ClassDef | ast.FunctionDef)
            if [_plain(d) for d in node.decorator_list] != [_plain(d) for d in theirs.decorator_list]:
                problems.append(f"{where}.{node.name}: other decorators")
            if isinstance(node, ast.ClassDef) and isinstance(theirs, ast.ClassDef):
                if [_plain(b) for b in node.bases] != [_plain(b) for b in theirs.bases]:
                    problems.append(f"{where}.{node.name}: other base classes")
            if isinstance(node, ast.FunctionDef) and isinstance(theirs, ast.FunctionDef):
                if _arguments(node) != _arguments(theirs):
                    problems.append(f"{where}.{node.name}: arguments {_arguments(node)}, the example's "
                                    f"{_arguments(theirs)}")
            problems += abridged_problems(node.body, theirs.body, f"{where}.{node.name}")
            at = match + 1
            continue
        match = next((i for i, s in enumerate(source) if i >= at and _plain(s) == _plain(node)), None)
        if match is None:
            problems.append(f"{where}: `{ast.unparse(node).splitlines()[0]}` is not there (or not in this order)")
        else:
            at = match + 1
    return problems


def check_part_of_pyproject(block: Block, package: Path) -> None:
    whole = tomllib.loads((package / "pyproject.toml").read_text())
    assert missing_from(tomllib.loads(block.text), whole) == [], f"{block} differs from {package.name}/pyproject.toml"


def check_abridged_from(block: Block, source: Path) -> None:
    snippet = ast.parse(block.text).body
    problems = abridged_problems(snippet, ast.parse(source.read_text()).body, source.stem)
    assert problems == [], f"{block} is not abridged from {source.relative_to(ROOT)}: {problems}"
    assert any(isinstance(n, ast.ClassDef) for n in snippet), f"{block}: no class shown"


def check_lines_in(block: Block, source: Path) -> None:
    """Every line of the block is a line of ``source``, in the same order (blank lines aside)."""
    theirs = source.read_text().splitlines()
    at = 0
    for line in block.text.splitlines():
        if not line.strip():
            continue
        assert line in theirs[at:], f"{block}: {line!r} is not in {source.relative_to(ROOT)} (after line {at})"
        at = theirs.index(line, at) + 1


# -- shell blocks --------------------------------------------------------------------------------------------------
def commands(block: Block) -> Iterator[tuple[list[str], str]]:
    """Each command of a shell block (``&&`` chains split) with the comment on its line."""
    for line in block.text.splitlines():
        code, _, comment = line.partition("#")
        for part in code.split("&&"):
            if part.strip():
                yield shlex.split(part), comment.strip()


def shown(comment: str) -> list[str]:
    """The names a comment says the command shows (``# shows `naive` from ...`` or ``# shows naive_margin``)."""
    m = re.match(r"shows `?([\w-]+)`?", comment)
    return [m.group(1)] if m else []


#: appended to the commands that train or attack, so that they run in seconds: the documented command's defaults
#: train a target for most of an hour on this machine
SHORTER = {"run": ["--n-per-class", "2", "--widths", "16", "--steps", "20", "--set", "steps=2", "-q",
                   *(a for kv in ("figures=false", "null_draws=1", "calibration_draws=2") for a in ("--protocol-set", kv))],
           "train": ["--n-per-class", "2", "--widths", "16", "--steps", "20", "-q"]}


def run_shell_block(block: Block, capsys: Any, known: set[tuple[str, ...]]) -> list[list[str]]:
    """Run the block's ``reconbench`` commands (those that train, shortened by ``SHORTER``) and check its
    ``pip install -e`` paths; any other command must be in ``known`` (its first two words). The commands run."""
    ran = []
    for args, comment in commands(block):
        if args[:3] == ["pip", "install", "-e"] and not args[3].startswith("."):
            package = ROOT / args[3]
            project = tomllib.loads((package / "pyproject.toml").read_text())["project"]
            assert project["name"] == package.name and "reconbench" in project["dependencies"], block
        elif args[0] == "reconbench":
            code, out, err = run_cli(args[1:] + SHORTER.get(args[1], []), capsys)
            assert code == 0, f"{block}: `{shlex.join(args)}` failed: {err[-800:]}"
            for name in shown(comment):
                assert re.search(rf"\b{re.escape(name)}\b", out), f"{block}: `{shlex.join(args)}` does not show {name}"
            ran.append(args)
        else:
            assert tuple(args[:2]) in known, f"{block}: `{shlex.join(args)}` is neither run nor checked here"
    return ran


@contextmanager
def in_folder(path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with monkeypatch.context() as mp:
        mp.chdir(path)
        yield


# -- the blocks, in order ------------------------------------------------------------------------------------------
def setup_block(block: Block, capsys: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The set-up line: every extra it installs exists, and the test command is the one README's CI line runs."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for args, _ in commands(block):
        if args[:2] == ["pip", "install"]:
            wanted = re.fullmatch(r"\.\[(\w+)\]", args[-1])
            assert wanted and wanted.group(1) in extras, f"{block}: {args[-1]} names no extra of pyproject.toml"
            assert "pytest-randomly" in " ".join(extras["test"]), "the extras lack the plugin that shuffles the tests"
    run_shell_block(block, capsys, {("python3", "-m"), (".", ".venv/bin/activate"), ("pip", "install"),
                                    ("python", "-m")})


def naive_pyproject(block: Block, *_: Any) -> None:
    check_part_of_pyproject(block, NAIVE)


def naive_source(block: Block, *_: Any) -> None:
    check_abridged_from(block, NAIVE / "src" / "reconbench_naive_attack.py")


def naive_commands(block: Block, capsys: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`reconbench plugins`, `list attacks` and the advertised `run`, the example registered as its entry point."""
    with example_registered("reconbench-naive-attack", "naive"), in_folder(tmp_path, monkeypatch):
        ran = run_shell_block(block, capsys, set())
    assert [a[1] for a in ran] == ["plugins", "list", "run"]
    assert sorted(p.name for p in (tmp_path / "runs").rglob("result.json")), "the run wrote no result"


def naive_test(block: Block, *_: Any) -> None:
    check_lines_in(block, NAIVE / "tests" / "test_conformance.py")


def lowrank_pyproject(block: Block, *_: Any) -> None:
    check_part_of_pyproject(block, LOWRANK)


def lowrank_source(block: Block, *_: Any) -> None:
    check_abridged_from(block, LOWRANK / "src" / "reconbench_lowrank_defense.py")


def lowrank_commands(block: Block, capsys: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`list defenses` and the advertised `train` (a defended target's card records the defense)."""
    with example_registered("reconbench-lowrank-defense", "lowrank"), in_folder(tmp_path, monkeypatch):
        ran = run_shell_block(block, capsys, set())
    assert [a[1] for a in ran] == ["list", "train"]
    cards = list((tmp_path / "targets" / "lowrank").rglob("card.json")) or list(
        (tmp_path / "targets" / "lowrank").rglob("*.json"))
    assert any('"low_rank"' in p.read_text() for p in cards), "the trained card does not record the defense"


def lowrank_privacy_axis(block: Block, capsys: Any, tmp_path: Path, *_: Any) -> None:
    """The privacy-axis tables, appended to the shipped suite that has the targets and attack they name."""
    with example_registered("reconbench-lowrank-defense", "lowrank"):
        suite = extended_suite(tmp_path, "defenses-cpu", block)
    axis = next(p for p in suite.privacy if p.name == "main")
    assert {"mnist-binary@low_rank=0.5", "mnist-binary@low_rank=0.1"} <= {p.target for p in axis.points}


def submission_tables(block: Block, capsys: Any, tmp_path: Path, *_: Any) -> None:
    """The contributor's tables, appended to the ci suite: read strictly, they add exactly the example's cells (the
    round trip of tests/integration/test_leaderboard_submit.py appends the same text)."""
    with example_registered("reconbench-naive-attack", "naive"):
        suite = extended_suite(tmp_path, "ci", block)
    added = sorted(c.cell_id for c in expand(suite) if c.attack.label == "naive_margin")
    assert added == ["digits-binary--naive_margin--gaussian--s0", "digits-binary--naive_margin--gaussian--s1"]
    submit_test = next(ROOT.glob("tests/**/test_leaderboard_submit.py")).read_text()
    assert block.text.strip() in submit_test, "tests/integration/test_leaderboard_submit.py appends other tables"


def extended_suite(folder: Path, shipped: str, block: Block) -> Suite:
    """The shipped suite with the block's tables appended, read strictly."""
    path = folder / f"{shipped}-extended.toml"
    path.write_text(find_suite(shipped).read_text() + "\n" + block.text)
    return load_suite(path, strict=True)


CHECKS: list[Callable[[Block, Any, Path, pytest.MonkeyPatch], None]] = [
    setup_block, naive_pyproject, naive_source, naive_commands, naive_test, lowrank_pyproject, lowrank_source,
    lowrank_commands, lowrank_privacy_axis, submission_tables]


def test_every_block_has_a_check():
    assert len(CONTRIBUTING) == len(CHECKS), (
        f"CONTRIBUTING.md has {len(CONTRIBUTING)} code blocks and {len(CHECKS)} checks: give a new block its check "
        f"here ({[str(b) for b in CONTRIBUTING]})")


@pytest.mark.parametrize("index", range(len(CHECKS)), ids=[c.__name__ for c in CHECKS])
def test_block(index, capsys, tmp_path, monkeypatch):
    if index >= len(CONTRIBUTING):
        pytest.fail(f"CONTRIBUTING.md has no block {index + 1} for {CHECKS[index].__name__}")
    CHECKS[index](CONTRIBUTING[index], capsys, tmp_path, monkeypatch)


# -- the checks can fail -------------------------------------------------------------------------------------------
def test_an_abridged_snippet_with_a_statement_the_example_lacks_is_refused():
    source = ast.parse("class A(B):\n    x: int = 1\n    def f(self, a):\n        y = 2\n        return a\n").body
    good = ast.parse("class A(B):\n    x: int = 1\n    def f(self, a):\n        ...\n        return a\n").body
    assert abridged_problems(good, source, "m") == []
    for bad in ("class A(C):\n    x: int = 1\n",               # another base
                "class A(B):\n    x: int = 2\n",               # another default
                "class A(B):\n    def f(self, b):\n        ...\n",   # another argument
                "class A(B):\n    def f(self, a):\n        return a\n        y = 2\n"):   # another order
        assert abridged_problems(ast.parse(bad).body, source, "m"), bad


def test_a_pyproject_block_with_another_value_is_refused():
    whole = {"project": {"name": "x", "dependencies": ["reconbench"]}}
    assert missing_from({"project": {"name": "x"}}, whole) == []
    assert missing_from({"project": {"name": "y"}}, whole) and missing_from({"tool": {}}, whole)


def test_blocks_are_read_with_their_indentation_removed():
    text = "a\n```bash\nx # c\n```\n1. item\n\n   ```toml\n   [t]\n   k = 1\n   ```\n"
    assert blocks(text) == [Block("bash", "x # c\n", 2), Block("toml", "[t]\nk = 1\n", 7)]
    assert list(commands(Block("bash", "a b && c d   # shows `e`\n", 1))) == [(["a", "b"], "shows `e`"),
                                                                               (["c", "d"], "shows `e`")]
