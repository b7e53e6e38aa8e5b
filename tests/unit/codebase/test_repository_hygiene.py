"""The tracked tree holds no absolute path of the machine that wrote a file (results are shared and committed)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
# home folders and work trees of the machines results come from; /tmp examples in docs are not machine paths
_ROOTS = ["root/", r"home/[\w.-]+/", r"Users/[\w.-]+/", "work/"]   # written without the leading slash on purpose
MACHINE_PATH = re.compile(r"""(?:^|(?<=[\s"'(=,\[`]))(""" + "|".join("/" + r for r in _ROOTS)
                          + r"""|[A-Za-z]:\\Users\\)""")


def tracked_text_files() -> list[Path]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    names = [n for n in out.decode().split("\0") if n]
    return [REPO / n for n in names if not n.endswith((".png", ".safetensors", ".gz", ".npz"))]


def test_no_absolute_machine_paths_in_tracked_files():
    offenders = []
    for path in tracked_text_files():
        if path.name == Path(__file__).name or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            if MACHINE_PATH.search(line):
                offenders.append(f"{path.relative_to(REPO)}:{lineno}: {line.strip()[:120]}")
    assert not offenders, "absolute paths of a machine in tracked files:\n" + "\n".join(offenders[:20])


def test_the_pattern_catches_what_it_should():
    # the examples are assembled from parts so that this file does not itself hold a machine path
    root, work, home = "/" + "root/", "/" + "work/", "/" + "home/"
    assert MACHINE_PATH.search(f'"card": "{root}.cache/reconbench/targets/ab"')
    assert MACHINE_PATH.search(f"result: {work}wt-x/benchmarks/results/a.json")
    assert MACHINE_PATH.search(f"{home}alice/runs")
    assert not MACHINE_PATH.search('"card": "~/.cache/reconbench/targets/ab"')
    assert not MACHINE_PATH.search(f"runs/bench/<suite>{work}<cell>/")   # a relative path that contains the word


def test_every_package_folder_is_installed():
    """pyproject lists the packages by hand (the plugins folder maps to another import name): a new folder must be listed."""
    import tomllib

    root = Path(__file__).resolve().parents[3]
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(root).parts) for p in (root / "reconbench").rglob("__init__.py")}
    assert found - listed == set(), f"add {sorted(found - listed)} to [tool.setuptools] packages in pyproject.toml"
    assert "reconbench_plugins" in listed
