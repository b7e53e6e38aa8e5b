"""After a GPU occasion, here: merge what the `run` call brought back and publish the board, in one command.

    python benchmarks/gpu/after_occasion.py FILES_AT [--card h200] [--repo ROOT] [--suite paper] [--board paper-gpu]

FILES_AT is the call's `files_at` folder: `pack/` (the slice's pack), and beside it `probe.json` and `step_ab.json`
when the call ran them. In order, stopping at the first failure with one line that names the step and what to do:

1. read     the card (e.g. `h200`) from the probe's JSON (`conditions.gpu`; `--card` where the JSON names no GPU);
2. clean    the checkout holds no uncommitted change to a tracked file (the board must come from one clean commit,
            and a merge that evaluates a cell whose runs came back in groups records this checkout's commit too);
3. unpack   `reconbench bench SUITE --unpack FILES_AT/pack --out RESULTS` (repeatable: a pack merged before is
            merged again as "already there"); where RESULTS is absent (a new checkout: `runs/` is ignored), it is
            first rebuilt from the tracked ledger, benchmarks/gpu/ledger/<suite name>/ (tracked_ledger.py), so that
            the cells merged by earlier occasions stay in the ledger and on the board;
4. publish  the board into a temporary folder (a copy of the published board when there is one, so that its
            releases and outside submissions stay), as `reconbench leaderboard SUITE --results RESULTS --publish
            --out leaderboards/BOARD` would;
5. verify   `reconbench leaderboard SUITE --out TEMP --verify`; only then
6. place    the verified board replaces leaderboards/BOARD (the published board is never half written);
7. probe    `probe.json` to benchmarks/results/gpu/probe_<card>.json, `step_ab.json` to step_ab_<card>.json;
8. index    a new board's entry in leaderboards/index-notes.toml ("first publication") and the index table of
            leaderboards/README.md (reconbench/leaderboard/index_table.py);
9. results  docs/results.md's table (reconbench/leaderboard/results_page.py);
10. ledger  the tracked ledger written from RESULTS (benchmarks/gpu/tracked_ledger.py `keep`): the ledger, the
            training states of targets with cells left while within --cap-mib (one line naming each not kept), the
            records a later publication reads;

then prints the `git add` and `git commit` lines (the message names the slice's commit, the cells it merged and the
board's commits and progress); it commits nothing itself. A pack with no finished cell (only training states) is
unpacked and its probe files copied; nothing is published, and the command says so (unless the results folder holds
merged cells the committed board lacks, e.g. after an earlier run of the command stopped before its board was placed,
or placed it and stopped before its commit: the new cells are counted against HEAD's board). The
size budget of a board (tests/unit/leaderboard/test_leaderboard_slim.py) is not this command's decision: decide it
before committing. Last, it prints what the next call carries, measured now (benchmarks/gpu/travel_size.py: the
carry list and its size against the device's 64 MiB, for the cells `--only` selects, every cell left without it,
their ledger and states read from the tracked ledger, which travels in the tree).

A script beside slice.sh rather than a `reconbench` subcommand: it writes this repository's tracked files (the
index, docs/results.md, benchmarks/results/gpu/), which an installed `reconbench` has no business knowing.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reconbench.records import BoardHeader

ROOT = Path(__file__).resolve().parents[2]
PROBE, STEP_AB, PACK = "probe.json", "step_ab.json", "pack"
RESULTS_GPU = Path("benchmarks/results/gpu")
CARD = re.compile(r"^[a-z0-9][a-z0-9.-]*$")
BOARD = re.compile(r"^[a-z0-9][a-z0-9-]*$")
STEPS = ("read", "clean", "unpack", "publish", "verify", "place", "probe", "index", "results", "ledger")
#: the step running now (for the line of an unexpected error)
CURRENT = ["read"]


def begin(step: str) -> None:
    CURRENT[0] = step


class StepFailed(Exception):
    """A step that cannot go on: ``what`` went wrong, ``fix`` is what to do."""

    def __init__(self, step: str, what: str, fix: str) -> None:
        super().__init__(f"{what}; {fix}")
        self.step, self.what, self.fix = step, what, fix

    def line(self) -> str:
        return f"error: step {STEPS.index(self.step) + 1} ({self.step}): {' '.join(self.what.split())}; {self.fix}"


@dataclass
class Occasion:
    """What the command found and did, for the closing lines."""

    card: str | None = None
    copies: dict[str, Path] = field(default_factory=dict)   # FILES_AT file -> where it goes in the repository
    commit: str | None = None                                # the slice's (its pack manifest's)
    cells: list[str] = field(default_factory=list)           # the finished cells the pack brought
    states: list[str] = field(default_factory=list)          # "target at step S" of training states it brought
    groups: list[str] = field(default_factory=list)          # "cell runs a-b" of groups of search runs it brought
    new_on_board: list[str] = field(default_factory=list)    # cells the board holds now and did not before
    published: bool = False
    header: BoardHeader | None = None                         # the board's header, once published
    home: Path | None = None                                  # the tracked ledger (relative to the repository)
    kept: list[str] = field(default_factory=list)             # the training states it keeps


def say(line: str) -> None:
    print(f"after-occasion: {line}", flush=True)


def card_name(gpu: str) -> str | None:
    """The short card name of a CUDA device name: "NVIDIA H100 80GB HBM3" -> "h100", "NVIDIA A100-SXM4-80GB" ->
    "a100", "NVIDIA GeForce RTX 4090" -> "rtx4090"; None when no model number is found."""
    words = [w for w in re.split(r"[\s_]+", gpu) if w.lower() not in ("nvidia", "geforce", "tesla", "quadro")]
    for i, word in enumerate(words):
        model = word.split("-")[0].lower()
        if re.fullmatch(r"[a-z]+\d+[a-z]*", model):
            return model
        if re.fullmatch(r"[a-z]+", model) and i + 1 < len(words) and re.fullmatch(r"\d+[a-z]*", words[i + 1].lower()):
            return model + words[i + 1].lower()
    return None


def _json_gpu(path: Path) -> str | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StepFailed("read", f"{path} does not read as JSON ({exc})", "fetch the call's files again") from None
    conditions = data.get("conditions") if isinstance(data, dict) else None
    gpu = conditions.get("gpu") if isinstance(conditions, dict) else None
    return str(gpu) if gpu else None


def read_files(files_at: Path, card: str | None, board: str, occasion: Occasion) -> Path | None:
    """Step 1: the pack (or None), the card, and the files to copy."""
    begin("read")
    if not files_at.is_dir():
        raise StepFailed("read", f"{files_at} is not a folder", "give the `run` reply's files_at folder")
    if (files_at / "manifest.json").is_file():
        raise StepFailed("read", f"{files_at} is a pack itself", f"give the folder above it (files_at), which holds "
                         f"{PACK}/ and {PROBE}")
    if not BOARD.match(board):
        raise StepFailed("read", f"--board {board!r} is not a board's folder name", "give a name of lower-case "
                         "letters, digits and dashes (e.g. paper-gpu)")
    pack = files_at / PACK if (files_at / PACK / "manifest.json").is_file() else None
    found = {name: files_at / name for name in (PROBE, STEP_AB) if (files_at / name).is_file()}
    if pack is None and not found:
        raise StepFailed("read", f"{files_at} holds neither {PACK}/manifest.json nor {PROBE} nor {STEP_AB}",
                         "give the `run` reply's files_at folder (the call's $OUT)")
    names = {name: card_name(gpu) if (gpu := _json_gpu(path)) else None for name, path in found.items()}
    read = sorted({n for n in names.values() if n})
    if len(read) > 1:
        raise StepFailed("read", f"{PROBE} and {STEP_AB} name different cards ({', '.join(read)})",
                         "copy each by hand: they did not come from one call")
    if read and card and card != read[0]:
        raise StepFailed("read", f"--card {card}, but the JSON names the card {read[0]}",
                         "leave --card out (the JSON's card names the files)")
    occasion.card = read[0] if read else card
    if found and occasion.card is None:
        raise StepFailed("read", f"{' and '.join(found)} {'names' if len(found) == 1 else 'name'} no GPU "
                         "(conditions.gpu: a CPU run?)",
                         "give --card NAME to name the files")
    if occasion.card is not None and not CARD.match(occasion.card):
        raise StepFailed("read", f"card {occasion.card!r} is not a file name part", "give --card in lower case, "
                         "letters, digits and dashes (e.g. h200)")
    stems = {PROBE: "probe", STEP_AB: "step_ab"}
    occasion.copies = {name: RESULTS_GPU / f"{stems[name]}_{occasion.card}.json" for name in found}
    say(f"read: card {occasion.card or '(none)'}; " + (f"pack {pack}" if pack else "no pack") +
        "".join(f"; {name} -> {dst}" for name, dst in occasion.copies.items()))
    return pack


def dirty_paths(repo: Path) -> list[str]:
    """Tracked files with uncommitted changes (untracked files do not count, as for a board's commit)."""
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo, capture_output=True,
                         text=True, timeout=30)
    return [line[3:] for line in out.stdout.splitlines() if line.strip()]


def check_clean(repo: Path, occasion: Occasion, board: str) -> None:
    """Step 2: a git checkout without uncommitted changes to tracked files."""
    from reconbench.provenance import read_git_commit

    begin("clean")
    commit = read_git_commit(repo)
    if commit is None:
        raise StepFailed("clean", f"{repo} is not a git checkout", "run it in the repository (or give --repo)")
    dirty = dirty_paths(repo)
    if dirty:
        ours = {str(p) for p in occasion.copies.values()} | {"docs/results.md", "leaderboards/README.md",
                                                               "leaderboards/index-notes.toml"}
        home = f"{occasion.home.as_posix()}/" if occasion.home is not None else None
        mine = [p for p in dirty if p in ours or p.startswith(f"leaderboards/{board}/")
                or (home is not None and p.startswith(home))]
        hint = (f"; {', '.join(mine)} this command writes again: `git checkout -- {' '.join(mine)}` restores them"
                if mine else "")
        raise StepFailed("clean", f"the checkout has uncommitted changes ({', '.join(dirty[:5])}"
                         f"{', ...' if len(dirty) > 5 else ''}); nothing was unpacked or published",
                         f"commit or stash them and run again (the board must come from one clean commit){hint}")
    say(f"clean: checkout at {commit[:12]}")
    import reconbench

    code_root = Path(reconbench.__file__).resolve().parents[1]
    if code_root != repo.resolve():
        say(f"note: reconbench runs from {code_root}, not {repo}: the board records that checkout's commit and "
            "cleanliness (install this checkout with `pip install -e .` to publish from it)")


def run_reconbench(step: str, args: list[str], fix: str) -> str:
    """``reconbench ARGS`` in this process (its output shown); a failure is this step's, in one line."""
    from reconbench.cli import main

    err = io.StringIO()
    code: object = 0
    with contextlib.redirect_stderr(err):
        try:
            main(args)
        except SystemExit as stop:
            code = stop.code
    text = err.getvalue()
    if code not in (0, None):
        errors = [ln for ln in text.splitlines() if ln.startswith("error")] or text.strip().splitlines()[-1:]
        raise StepFailed(step, f"`reconbench {shlex.join(args)}` failed: {errors[-1] if errors else code}", fix)
    sys.stderr.write(text)
    return text


def restore_results(results: Path, occasion: Occasion) -> None:
    """Step 3, first: an absent results folder (a new checkout) rebuilt from the tracked ledger, where there is one."""
    begin("unpack")
    tracked = tracked_ledger()
    if results.exists() or occasion.home is None or not (occasion.home / tracked.LEDGER).is_file():
        return
    try:
        n = tracked.restore(occasion.home, results)
    except (tracked.LedgerError, OSError, ValueError) as exc:
        raise StepFailed("unpack", f"{results} could not be rebuilt from {occasion.home} ({exc})",
                         f"remove {results} and run this command again") from None
    say(f"unpack: {results} was absent: rebuilt from the tracked ledger {occasion.home} ({n} file(s))")


def tracked_ledger() -> ModuleType:
    """benchmarks/gpu/tracked_ledger.py, loaded beside this file."""
    return _beside("tracked_ledger")


def _beside(stem: str) -> ModuleType:
    import importlib.util

    name = f"gpu_{stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{stem}.py"))
    assert spec is not None and spec.loader is not None
    module = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))   # its dataclasses look it up
    spec.loader.exec_module(module)
    return module


def unpack(pack: Path, suite: str, results: Path, occasion: Occasion) -> None:
    """Step 3: merge the pack; note its commit, finished cells and training states."""
    from reconbench.bench.slice_pack import read_manifest
    from reconbench.errors import ReconbenchError

    begin("unpack")
    try:
        manifest = read_manifest(pack)
    except ReconbenchError as exc:
        raise StepFailed("unpack", str(exc), "fetch the call's files again") from None
    run_reconbench("unpack", ["bench", suite, "--unpack", str(pack), "--out", str(results)],
                   "fix what it names and run this command again (nothing was merged)")
    occasion.commit = manifest.commit
    grouped = [g.cell_id for g in manifest.groups if (results / "cells" / f"{g.cell_id}.json").is_file()]
    occasion.cells = sorted(set(manifest.cells) | set(grouped))
    occasion.states = [f"{s.recipe_key} at step {s.step}" for s in manifest.training]
    occasion.groups = [f"{g.cell_id} runs {min(g.runs)}-{max(g.runs)} of {g.search_runs}" for g in manifest.groups
                       if g.runs]
    say(f"unpack: {len(occasion.cells)} finished cell(s) from the slice at commit {manifest.commit}"
        + (f", {len(occasion.states)} training state(s)" if occasion.states else "")
        + (f", {len(occasion.groups)} group(s) of search runs" if occasion.groups else ""))


def cell_ids(folder: Path) -> set[str]:
    """The cells of a results folder or a board (their ``cells/*.json``)."""
    return {p.stem for p in (folder / "cells").glob("*.json")} if (folder / "cells").is_dir() else set()


def committed_cells(board: Path) -> set[str]:
    """The cells of the board as the checkout's HEAD commit holds it (none for a board never committed): what a
    board placed by an earlier run of this command, stopped before its commit, does not count as published."""
    out = subprocess.run(["git", "ls-tree", "--name-only", "HEAD", "--", f"{board.as_posix()}/cells/"],
                         capture_output=True, text=True, timeout=30)
    return {Path(line).stem for line in out.stdout.splitlines() if line.endswith(".json")} if not out.returncode \
        else set()


def what_came(occasion: Occasion) -> str:
    """What the pack held besides finished cells, for the lines that say nothing was published."""
    held = [f"training state(s): {', '.join(occasion.states)}" if occasion.states else "",
            f"group(s) of search runs: {', '.join(occasion.groups)}" if occasion.groups else ""]
    return "; ".join(h for h in held if h) or "nothing else"


def publish(suite_name: str, results: Path, board: str, *, figures: bool) -> None:
    """Steps 4-6: publish into a temporary folder, verify it, then put it in place of leaderboards/BOARD."""
    from reconbench.bench.suite import load_suite
    from reconbench.errors import ReconbenchError
    from reconbench.leaderboard.render import build_leaderboard

    begin("publish")
    published = Path("leaderboards") / board
    command = shlex.join(["reconbench", "leaderboard", suite_name, "--results", str(results), "--publish", "--out",
                          str(published), *([] if figures else ["--no-figures"])])
    Path("runs").mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".publishing-", dir="runs"))
    try:
        draft = work / board
        if published.is_dir():
            shutil.copytree(published, draft, symlinks=True)
        try:
            data = build_leaderboard(load_suite(suite_name), results, draft, command=command,
                                     figures=None if figures else False, publish=True)
        except ReconbenchError as exc:
            raise StepFailed("publish", str(exc), f"{published} is unchanged; fix what it names and run this "
                             "command again (the unpack is repeatable)") from None
        for line in data["dropped_submissions"]:
            print(f"warning: {line}", file=sys.stderr)
        cells = data["header"]["cells"]
        say(f"publish: {cells['ok']} ok, {cells['failed']} failed, {cells['not_run']} not run (as {command})")
        begin("verify")
        try:
            run_reconbench("verify", ["leaderboard", suite_name, "--out", str(draft), "--verify"],
                           f"{published} is unchanged; the draft was removed: fix what it names and run this command "
                           "again")
        except StepFailed as failed:
            if "0 cells re-scored" in failed.what:   # a board of GPU cells cannot be re-run here instead
                failed.fix = (f"{published} is unchanged: none of its cells brought candidates or figure pairs "
                              "back, so nothing can be re-scored; a pack carries the candidates of the suite's sampled "
                              "cells that fit its file (" + ", ".join(sampled_cells(suite_name)) + ") and the figure "
                              "pairs of every finished cell, which a board keeps of its figure's cells: publish with "
                              "figures "
                              "(no --no-figures), or once a sampled cell has come back")
            raise
        say("verify: passed")
        begin("place")
        replaced = work / ".replaced"
        if published.exists():
            published.rename(replaced)
        try:
            draft.rename(published)
        except OSError as exc:
            if replaced.exists():
                replaced.rename(published)   # the published board back as it was
            raise StepFailed("place", f"the verified board could not be moved to {published} ({exc})",
                             f"{published} is unchanged; free the folder and run this command again") from None
        say(f"place: {published}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def sampled_cells(suite_name: str) -> list[str]:
    """The cells whose candidates a slice's pack carries (``slice_pack.sample_cells``)."""
    from reconbench.bench.cells import expand
    from reconbench.bench.slice_pack import sample_cells
    from reconbench.bench.suite import load_suite

    suite = load_suite(suite_name)
    return sample_cells(suite, [c.cell_id for c in expand(suite)])


def copy_probe_files(files_at: Path, occasion: Occasion) -> None:
    """Step 7: each file copied through a temporary one (a tracked file is never left half written)."""
    from reconbench.provenance import write_bytes_atomic

    begin("probe")
    for name, dst in occasion.copies.items():
        write_bytes_atomic(dst, (files_at / name).read_bytes())
        say(f"probe: {name} -> {dst}")


def committed(path: str) -> bool:
    """Whether ``path`` is in the checkout's HEAD commit."""
    return subprocess.run(["git", "cat-file", "-e", f"HEAD:{path}"], capture_output=True, timeout=30).returncode == 0


def write_index(board: str) -> None:
    """Step 8: a new board's notes entry ("first publication"; dropped when a committed board is published again),
    and the index table."""
    from reconbench.errors import ReconbenchError
    from reconbench.leaderboard.index_table import BoardNote, add_board, drop_note, index_table, write_into

    begin("index")
    lb, first = Path("leaderboards"), "first publication"
    try:
        if not committed(f"leaderboards/{board}/results.json"):
            if add_board(lb, board, BoardNote(note=first)):
                say(f"index: {board} added to {lb / 'index-notes.toml'} (\"{first}\")")
        elif drop_note(lb, board, first):
            say(f"index: {board}'s note \"{first}\" dropped from {lb / 'index-notes.toml'} (published again)")
        changed = write_into(lb / "README.md", index_table(lb))
    except ReconbenchError as exc:
        raise StepFailed("index", str(exc), "fix it, then run `python -m reconbench.leaderboard.index_table "
                         "--write` and the results step by hand (the board is in place)") from None
    say(f"index: {lb / 'README.md'} {'rewritten' if changed else 'up to date'}")


def write_results_page() -> None:
    """Step 9."""
    from reconbench.leaderboard.results_page import board_results_table, write_into

    begin("results")
    page = Path("docs/results.md")
    try:
        changed = write_into(page, board_results_table(Path("leaderboards")))
    except (OSError, ValueError) as exc:
        raise StepFailed("results", f"{page} could not be written ({exc})", "restore its markers, then run `python "
                         "-m reconbench.leaderboard.results_page --write docs/results.md`") from None
    say(f"results: {page} {'rewritten' if changed else 'up to date'}")


def keep_ledger(suite: str, results: Path, occasion: Occasion, cap_mib: float) -> None:
    """Step 10: the tracked ledger written from the results folder (nothing to keep where it holds no ledger)."""
    begin("ledger")
    tracked = tracked_ledger()
    if occasion.home is None or not (results / tracked.LEDGER).is_file():
        say(f"ledger: {results} holds no ledger; nothing kept")
        return
    try:
        kept = tracked.keep(suite, results, occasion.home, int(cap_mib * 2**20))
    except (tracked.LedgerError, OSError, ValueError) as exc:
        raise StepFailed("ledger", str(exc), f"fix it, then run `python benchmarks/gpu/tracked_ledger.py keep {suite}`"
                         " (the board is in place)") from None
    for line in kept.left_out:
        say(f"ledger: {line}")
    occasion.kept = kept.states
    say(f"ledger: {occasion.home}: the ledger, {len(kept.states)} training state(s) "
        f"({', '.join(kept.states) or 'none'}), {kept.records} record file(s)")


def changed(paths: list[str]) -> list[str]:
    """Those of ``paths`` with changes git would commit (new files included)."""
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", *paths], capture_output=True,
                         text=True, timeout=30).stdout
    touched = {line[3:].split(" -> ")[-1] for line in out.splitlines() if line.strip()}
    return [p for p in paths if any(t == p or t.startswith(p.rstrip("/") + "/") for t in touched)]


def commit_lines(occasion: Occasion, board: str) -> list[str]:
    """The `git add` and `git commit` lines for what the command wrote."""
    from reconbench.leaderboard.board_progress import commit_shares

    home = [occasion.home.as_posix()] if occasion.home is not None else []
    paths = changed([*(str(p) for p in occasion.copies.values()), f"leaderboards/{board}", "leaderboards/README.md",
                     "leaderboards/index-notes.toml", "docs/results.md", *home])
    if not paths:
        return []
    slice_at = f"the slice at {(occasion.commit or 'an unknown commit')[:12]}"
    files = ", ".join(p.name for p in occasion.copies.values() if str(p) in paths)
    if occasion.published and (header := occasion.header) is not None:
        progress = header.progress or f"all {header.cells.get('planned', 0)} cells"
        subject = (f"{board}: {len(occasion.new_on_board)} new cell(s), board {progress} ({occasion.card or 'GPU'} "
                   f"occasion, {slice_at})")
        body = [f"New on the board: {', '.join(occasion.new_on_board) or 'none'}.",
                f"Cells merged from this occasion's pack: {', '.join(occasion.cells) or 'none'}.",
                "The board's cells ran at commits " + "; ".join(s.text(12) for s in commit_shares(header)) + "."]
    else:
        subject = f"GPU occasion ({occasion.card or 'GPU'}, {slice_at}): no finished cell, nothing published"
        body = [f"The pack held no finished cell; merged into the results folder: {what_came(occasion)}."]
    if home and home[0] in paths:
        body.append(f"{home[0]}: the ledger and the training states that travel to the next call "
                    f"({', '.join(occasion.kept) or 'none'}).")
    if files:
        body.append(f"{files}: what the call measured on the card.")
    return [f"git add -A -- {shlex.join(paths)}",
            f"git commit -m {shlex.quote(subject)} -m {shlex.quote(' '.join(body))}"]


def machine_paths(lines: list[str], most: int = 5) -> list[str]:
    """'FILE:LINE holds ...' for the text files the printed `git add` line adds that hold an absolute path of a
    machine (the repository's hygiene test refuses them), at most ``most`` of them and a count of the rest."""
    from reconbench.command_text import machine_path_lines

    if not lines:
        return []
    paths = shlex.split(lines[0])[3:]   # git add -A -- PATH ...
    found: list[str] = []
    for path in paths:
        files = sorted(f for f in Path(path).rglob("*") if f.is_file()) if Path(path).is_dir() else [Path(path)]
        for f in files:
            try:
                text = f.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            found += [f"{f.as_posix()}:{n} holds an absolute path of a machine (tests/unit/codebase/"
                      f"test_repository_hygiene.py refuses it): write it from $OUT, $TMPDIR or the repository"
                      for n in machine_path_lines(text)]
    return found[:most] + ([f"... and {len(found) - most} more such line(s)"] if len(found) > most else [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Steps, in order: " + ", ".join(STEPS) + " (this file's docstring).")
    parser.add_argument("files_at", type=Path, help="the `run` reply's files_at folder (pack/, probe.json, "
                        "step_ab.json)")
    parser.add_argument("--card", help="the card's short name (e.g. h200) where the JSON names no GPU; must agree "
                        "with it where it does")
    parser.add_argument("--repo", type=Path, default=ROOT, help="the repository's root (default: this checkout)")
    parser.add_argument("--suite", default="paper", help="the suite the slices ran (default: paper)")
    parser.add_argument("--board", default="paper-gpu", help="the board's folder under leaderboards/ (default: "
                        "paper-gpu)")
    parser.add_argument("--results", type=Path, help="the merged results folder, relative to --repo (default: "
                        "runs/bench/<suite name>)")
    parser.add_argument("--no-figures", action="store_true", help="publish without drawing the figures")
    parser.add_argument("--cap-mib", type=float, default=None, help="the most MiB of training states (cards "
                        "included) the tracked ledger keeps (default: tracked_ledger.py's)")
    parser.add_argument("--only", action="append", default=[], metavar="PATTERN",
                        help="the cells of the next call (repeatable, as `reconbench bench --only`): the carry list and "
                        "size printed at the end are theirs (default: every cell left)")
    parser.add_argument("--debug", action="store_true", help="an unexpected error shows its traceback")
    args = parser.parse_args(argv)
    files_at = args.files_at.resolve()
    repo = args.repo.resolve()
    if Path(args.suite).is_file():   # a suite file named from here stays that file after the chdir to the repo
        args.suite = str(Path(args.suite).resolve())
    occasion = Occasion()
    start = Path.cwd()
    try:
        pack = read_files(files_at, args.card, args.board, occasion)
        os.chdir(repo)   # every path below is the repository's, as the manual steps typed them
        from reconbench.bench.suite import load_suite
        from reconbench.errors import ReconbenchError
        from reconbench.leaderboard.results_file import read_results
        from reconbench.records import BoardHeader

        try:
            suite = load_suite(args.suite)
        except ReconbenchError as exc:
            raise StepFailed("read", str(exc), "give --suite as `reconbench bench` takes it") from None
        occasion.home = tracked_ledger().home_of(suite.name)
        check_clean(repo, occasion, args.board)
        results = args.results or Path("runs/bench") / suite.name
        restore_results(results, occasion)
        if pack is not None:
            unpack(pack, args.suite, results, occasion)
        board = Path("leaderboards") / args.board
        before = committed_cells(board)   # not the folder: an earlier run may have placed it and stopped after
        pending = sorted(cell_ids(results) - before)   # merged earlier, never committed (a failed earlier run)
        if occasion.cells or pending:
            if not occasion.cells:
                say(f"publish: the pack held no finished cell, but {results} holds {len(pending)} the board lacks")
            publish(args.suite, results, args.board, figures=not args.no_figures)
            occasion.published = True
            occasion.header = BoardHeader.from_dict(read_results(board)["header"])
            occasion.new_on_board = sorted(cell_ids(board) - before)
        else:
            say(f"publish: nothing to publish: the pack held no finished cell ({what_came(occasion)}); {board} is "
                "unchanged" if pack is not None else f"publish: nothing to publish: no pack came back; {board} is "
                "unchanged")
        copy_probe_files(files_at, occasion)
        if occasion.published:
            write_index(args.board)
            write_results_page()
        keep_ledger(args.suite, results, occasion,
                    tracked_ledger().CAP_MIB if args.cap_mib is None else args.cap_mib)
        lines = commit_lines(occasion, args.board)
        for problem in machine_paths(lines):
            say(f"warning: {problem}")
    except StepFailed as failed:
        print(failed.line(), file=sys.stderr)
        return 1
    except Exception as exc:   # a bug: one line, as for the others, with where it happened
        if args.debug:
            raise
        step = CURRENT[0]
        at = STEPS.index(step) - STEPS.index("place")
        kept = (f"leaderboards/{args.board} is as it was" if at < 0 else
                f"leaderboards/{args.board} may be missing (`git checkout -- leaderboards/{args.board}` restores the "
                "committed one)" if at == 0 else "the board is in place; the steps after this one did not run")
        print(f"error: step {STEPS.index(step) + 1} ({step}): unexpected {type(exc).__name__}: "
              f"{' '.join(str(exc).split())}; {kept}: run again with --debug for the traceback", file=sys.stderr)
        return 1
    finally:
        os.chdir(start)
    if lines:
        say("done; commit it (this command commits nothing" + ("; decide the board's size budget first, "
            "benchmarks/gpu/README.md \"After it\"" if occasion.published else "") + "):")
        print("\n".join(lines))
    else:
        say("done; nothing to commit")
    ledger_at = occasion.home if occasion.home is not None and (repo / occasion.home / "finished.json").is_file() \
        else results
    next_call(repo, args.suite, repo / ledger_at, args.only)
    return 0


def next_call(repo: Path, suite: str, results: Path, only: list[str]) -> None:
    """What the next `run` call carries for ``only`` (every cell left: none given), measured by travel_size.py: its
    carry list and its size against the device's limit; over it, one line naming what to drop (the occasion's work
    is done either way)."""
    travel = _beside("travel_size")
    say("the next call" + (f" (--only {' '.join(only)})" if only else " (every cell left; --only narrows it)") +
        " carries, measured now (benchmarks/gpu/travel_size.py):")
    sys.stdout.flush()
    code = travel.main(["--repo", str(repo), "--suite", suite, "--results", str(results),
                        *(a for p in only for a in ("--only", p))])
    if code != 0:
        say("the next call as measured would be refused: carry less (the line above says what), or select fewer "
            "cells with --only")


if __name__ == "__main__":
    sys.exit(main())
