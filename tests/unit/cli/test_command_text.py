"""A recorded command holds no absolute path of the machine, and a shell turns it back into the command that ran."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from reconbench.command_text import portable_command

S, T = "/" + "srv", "/" + "tmp"   # assembled: this file holds no absolute path itself
ENV = {"OUT": f"{S}/out", "TMPDIR": T, "HOME": f"{S}/alice"}
CWD = f"{S}/repo"
ARGS = ["reconbench", "bench", "paper", "--pack", f"{S}/out/pack", "--out", f"{T}/tmp.XJY0rPhjOL",
        "--finished", f"{S}/repo/runs/bench/paper/finished.json", "--only", "mnist-binary--*--gaussian--*",
        f"--data-root={S}/alice/data with space", "--costs", f"{S}/outside/probe.json", f"{S}x/elsewhere/x",
        f"{S}/out"]


def test_paths_under_the_roots_are_written_from_them():
    text = portable_command(ARGS, cwd=CWD, env=ENV)
    assert f"{S}/out/" not in text and f"{T}/" not in text and f"{S}/alice" not in text and f"{S}/repo" not in text
    assert "$OUT/pack" in text and "--data-root=$HOME'/data with space'" in text
    assert "$TMPDIR/tmp.XJY0rPhjOL" in text and " runs/bench/paper/finished.json" in text
    # a folder that only begins with the root's name is another folder, and a path under no root stays as it was
    assert f"{S}/outside/probe.json" in text and f"{S}x/elsewhere/x" in text
    assert text.endswith(" $OUT")


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash to expand the placeholders")
def test_a_shell_expands_the_record_back_into_the_command(tmp_path):
    """The independent reading: bash, with the same variables, gives back every argument (a relative path as the
    same file from the working directory)."""
    cwd = tmp_path / "repo"
    cwd.mkdir()
    env = {"OUT": str(tmp_path / "out"), "TMPDIR": str(tmp_path / "tmp"), "HOME": str(tmp_path / "home")}
    args = [a.replace(f"{S}/out", env["OUT"]).replace(T, env["TMPDIR"]).replace(f"{S}/alice", env["HOME"])
            .replace(f"{S}/repo", str(cwd)) for a in ARGS]
    text = portable_command(args, cwd=str(cwd), env=env)
    shown = subprocess.run(["bash", "-c", f"printf '%s\\0' {text}"], cwd=cwd, env={**os.environ, **env},
                           capture_output=True, text=True, check=True).stdout.split("\0")[:-1]
    assert len(shown) == len(args)
    for given, back in zip(args, shown, strict=True):
        if given.startswith("/") and not back.startswith("/"):
            assert str(cwd / back) == given
        else:
            assert back == given


def test_the_cli_records_commands_without_machine_paths(monkeypatch, tmp_path):
    from reconbench.cli import common

    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(common, "ARGV", ["bench", "ci", "--pack", str(tmp_path / "out" / "pack"),
                                         "--out", str(tmp_path / "runs" / "ci")])
    assert common.command_line() == "reconbench bench ci --pack $OUT/pack --out runs/ci"


def test_after_occasion_warns_of_a_machine_path_in_what_it_adds(tmp_path, monkeypatch):
    """The files the printed `git add` line names are read, and a line with a device's absolute path is named."""
    from pathlib import Path

    from _helpers.examples import load_module

    root = Path(__file__).resolve().parents[3]
    after = load_module("gpu_after_occasion", root / "benchmarks" / "gpu" / "after_occasion.py")
    board = tmp_path / "leaderboards" / "b"
    board.mkdir(parents=True)
    device = "/" + "root/out/pack"   # assembled so that this file holds no machine path itself
    (board / "README.md").write_text(f"ok\n- **Produced by:** `reconbench bench x --pack {device}`\n")
    (board / "clean.json").write_text('{"command": "reconbench bench x --pack $OUT/pack"}\n')
    monkeypatch.chdir(tmp_path)
    found = after.machine_paths(["git add -A -- leaderboards/b", "git commit -m x"])
    assert len(found) == 1 and found[0].startswith("leaderboards/b/README.md:2 holds an absolute path")
    assert after.machine_paths([]) == []
