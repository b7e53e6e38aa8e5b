"""What travels to the device machine: every runtime dependency of pyproject.toml is in the device image
(benchmarks/gpu/device_packages.txt), among the wheels benchmarks/gpu/fetch_wheels.sh carries, or named there as one
a slice never imports (with why), as are the carried packages' own requirements; slice.sh installs the wheels a
Python lacks and stops in one line, before the probe, when an import is missing; and a slice runs with kornia (not
carried) unimportable. No network: the wheels' requirements are read from this environment's installed metadata."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.metadata import requires, version
from pathlib import Path
from types import ModuleType

import pytest
import tomllib
from _helpers.examples import load_module
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[3]
GPU = ROOT / "benchmarks" / "gpu"
#: the device's Python, for the requirements' markers
DEVICE_MARKERS = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
                  "platform_system": "Linux", "implementation_name": "cpython", "platform_machine": "x86_64",
                  "extra": ""}


def image_packages() -> set[str]:
    lines = (GPU / "device_packages.txt").read_text().splitlines()
    return {canonicalize_name(x.strip()) for x in lines if x.strip() and not x.startswith("#")}


def carried_pins() -> dict[str, Version]:
    """fetch_wheels.sh's list: the ``wheels=( ... )`` array, one NAME==VERSION a line (comments after ``#``)."""
    text = (GPU / "fetch_wheels.sh").read_text()
    match = re.search(r"^wheels=\(\n(.*?)^\)", text, re.S | re.M)
    assert match, "fetch_wheels.sh holds no wheels=( ... ) list"
    pins: dict[str, Version] = {}
    for line in match.group(1).splitlines():
        spec = line.split("#")[0].strip()
        if spec:
            name, _, pinned = spec.partition("==")
            assert pinned, f"fetch_wheels.sh: {spec!r} is not pinned as NAME==VERSION"
            pins[canonicalize_name(name)] = Version(pinned)
    return pins


def not_carried(text: str | None = None) -> dict[str, str]:
    """fetch_wheels.sh's runtime dependencies a slice never imports: ``#   not carried: NAME: why`` (the reason may
    go on over further comment lines indented deeper), name -> reason. A name without a reason is refused."""
    text = (GPU / "fetch_wheels.sh").read_text() if text is None else text
    out: dict[str, str] = {}
    name = ""
    for line in text.splitlines():
        entry = re.match(r"^#   not carried: ([A-Za-z0-9_.-]+):?(.*)$", line)
        if entry:
            name = canonicalize_name(entry.group(1))
            out[name] = entry.group(2).strip()
        elif name and re.match(r"^#     \S", line):
            out[name] = f"{out[name]} {line[1:].strip()}".strip()
        else:
            name = ""
    for n, why in out.items():
        assert why, f"fetch_wheels.sh: {n} is declared not carried without a reason: write why after '{n}:'"
    return out


def runtime_requirements(pyproject: Path) -> list[Requirement]:
    return [Requirement(r) for r in tomllib.loads(pyproject.read_text())["project"]["dependencies"]]


def uncovered(reqs: list[Requirement], image: set[str], carried: dict[str, Version],
              unneeded: dict[str, str] | None = None) -> list[str]:
    """The requirements (for the device's Python) that neither the image nor the carried wheels meet and that are
    not declared unneeded on the device with a reason: a name in none of them, or a carried pin below the stated
    minimum."""
    out = []
    for r in reqs:
        if r.marker is not None and not r.marker.evaluate(DEVICE_MARKERS):
            continue
        name = canonicalize_name(r.name)
        if (unneeded or {}).get(name):
            continue
        if name in carried:
            if not r.specifier.contains(carried[name], prereleases=True):
                out.append(f"{r} (carried: {carried[name]})")
        elif name not in image:
            out.append(str(r))
    return out


def test_the_package_list_is_the_images_and_the_carried_wheels_are_not_in_it():
    image, carried = image_packages(), carried_pins()
    assert len(image) > 150 and {"torch", "numpy", "safetensors", "pluggy", "click"} <= image
    assert {"cattrs", "attrs", "typing-extensions"} == set(carried)
    assert "cattrs" not in image and "kornia" not in image


def test_kornia_is_declared_not_carried_with_its_reason_and_is_neither_carried_nor_in_the_image():
    """The not-carried list names pyproject dependencies only (none stale), each with a reason, none also carried
    or in the image (where the declaration would hide nothing)."""
    unneeded, carried, image = not_carried(), carried_pins(), image_packages()
    assert set(unneeded) == {"kornia"}
    assert "ssim" in unneeded["kornia"].lower() and "test" in unneeded["kornia"]
    pyproject = {canonicalize_name(r.name) for r in runtime_requirements(ROOT / "pyproject.toml")}
    assert set(unneeded) <= pyproject
    assert not set(unneeded) & (set(carried) | image)


def test_every_runtime_dependency_of_pyproject_travels_is_in_the_image_or_is_not_needed_there():
    reqs = runtime_requirements(ROOT / "pyproject.toml")
    assert uncovered(reqs, image_packages(), carried_pins(), not_carried()) == []
    # without the declaration, kornia (the image lacks it, no wheel carries it) is what is missing
    assert uncovered(reqs, image_packages(), carried_pins()) == ["kornia>=0.7"]


def test_a_new_dependency_in_no_list_is_caught(tmp_path):
    """The check can fail: pyproject.toml with one more dependency the image lacks, no wheel carries and no line
    declares unneeded."""
    text = (ROOT / "pyproject.toml").read_text().replace('dependencies = [\n', 'dependencies = [\n  "ujson>=5",\n', 1)
    (tmp_path / "pyproject.toml").write_text(text)
    reqs = runtime_requirements(tmp_path / "pyproject.toml")
    assert uncovered(reqs, image_packages(), carried_pins(), not_carried()) == ["ujson>=5"]
    # declared with a reason it passes; declared without one the declaration is refused in one line
    assert uncovered(reqs, image_packages(), carried_pins(), {**not_carried(), "ujson": "why"}) == []
    with pytest.raises(AssertionError, match="ujson is declared not carried without a reason"):
        not_carried("#   not carried: ujson:\n#   not carried: kornia: the CPU test only\n")
    # a reason over two comment lines is read whole; a line outside the block ends it
    assert not_carried("#   not carried: Foo_Bar: one\n#     two\n#\n#     three\n") == {"foo-bar": "one two"}
    # and a carried pin below a stated minimum
    low = {**carried_pins(), "attrs": Version("20.1")}
    assert uncovered([Requirement("attrs>=25.4.0")], image_packages(), low) == ["attrs>=25.4.0 (carried: 20.1)"]


def test_the_carried_packages_own_requirements_travel_too():
    """Each carried package's runtime requirements (this environment's metadata of the pinned version, extras left
    out, markers of Python 3.12 on Linux) are met by the image or by another carried wheel: cattrs's attrs>=25.4
    and typing-extensions>=4.14."""
    carried = carried_pins()
    for name, pinned in carried.items():
        if Version(version(name)) != pinned:
            pytest.skip(f"{name} {version(name)} is installed here, not the carried {pinned}: its requirements differ")
        reqs = [Requirement(r) for r in requires(name) or []]
        assert uncovered(reqs, image_packages(), carried) == [], name


def load_carried_wheels() -> ModuleType:
    return load_module('carried_wheels', GPU / "carried_wheels.py")


def test_the_wheels_a_python_needs_are_those_it_lacks_or_holds_older(tmp_path):
    cw = load_carried_wheels()
    have = version("cattrs")
    for name in (f"cattrs-{have}-py3-none-any.whl", "cattrs-9999.0-py3-none-any.whl",
                 "no_such_dist_here-1.0-py3-none-any.whl"):
        (tmp_path / name).touch()
    assert cw.needed(tmp_path) == [f"cattrs 9999.0 (installed: {have})", "no_such_dist_here 1.0 (not installed)"]
    (tmp_path / "cattrs-9999.0-py3-none-any.whl").unlink()
    (tmp_path / "no_such_dist_here-1.0-py3-none-any.whl").unlink()
    assert cw.needed(tmp_path) == []


def test_slice_sh_stops_in_one_line_before_the_probe_when_cattrs_is_missing(tmp_path):
    """A Python that cannot import cattrs (a stand-in package that raises as a missing one does, first on the path):
    slice.sh exits 2 with one line naming cattrs and fetch_wheels.sh, and the probe never ran."""
    fake = tmp_path / "fake" / "cattrs"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'cattrs'\", name='cattrs')\n")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake"), "OUT": str(out), "PROBE_BUDGET": "5",
           "PROBE_ARGS": "--tiny --device cpu", "PYTHON": sys.executable, "RECONBENCH_WHEELS": str(tmp_path / "none")}
    done = subprocess.run(["bash", str(GPU / "slice.sh"), str(GPU / "tiny.toml"), "cpu", "60"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "no module 'cattrs'" in lines[0] and "benchmarks/gpu/fetch_wheels.sh" in lines[0]
    assert not (out / "probe.json").exists()


#: a stand-in ``kornia`` first on the path: importing it (or any submodule) fails as a missing package does
NO_KORNIA = "raise ModuleNotFoundError(\"No module named 'kornia'\", name='kornia')\n"


def shim_without_kornia(tmp_path: Path) -> Path:
    """A folder for the front of PYTHONPATH: the failing ``kornia``, and this checkout's plugins under their import
    name (as slice.sh registers them where pip cannot install the package), so that slice.sh finds the package
    installed from this tree and installs nothing."""
    shim = tmp_path / "shim"
    (shim / "kornia").mkdir(parents=True)
    (shim / "kornia" / "__init__.py").write_text(NO_KORNIA)
    (shim / "reconbench_plugins").symlink_to(ROOT / "plugins", target_is_directory=True)
    return shim


def test_the_kornia_stand_in_does_block_kornia(tmp_path):
    """The blocker works: with the shim first on the path, ``import kornia.metrics`` fails as a missing package."""
    env = {**os.environ, "PYTHONPATH": f"{shim_without_kornia(tmp_path)}{os.pathsep}{ROOT}"}
    done = subprocess.run([sys.executable, "-c", "import kornia.metrics"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1 and "No module named 'kornia'" in done.stderr, done.stderr


@pytest.mark.slow
def test_a_slice_and_the_probes_evaluation_run_without_kornia(tmp_path):
    """slice.sh end to end on the CPU (tiny.toml) in a Python that cannot import kornia, as on the device image: it
    passes its pre-flight check, scores every cell (the papers' SSIM among the scores) and writes the pack, which
    merges here; and the probe's evaluation case (the papers' SSIM of a paper-size cell) runs too. Fails if a slice,
    its evaluation or the probe imports kornia."""
    out, results = tmp_path / "out", tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": f"{shim_without_kornia(tmp_path)}{os.pathsep}{ROOT}", "OUT": str(out),
           "PYTHON": sys.executable, "RECONBENCH_WHEELS": str(tmp_path / "none"),
           "RECONBENCH_CACHE": str(tmp_path / "cache"), "RECONBENCH_SLICE_COMMIT": "0" * 40}
    env.pop("PROBE_BUDGET", None)
    done = subprocess.run(["bash", str(GPU / "slice.sh"), str(GPU / "tiny.toml"), "cpu", "240"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "No module named 'kornia'" not in done.stdout + done.stderr, done.stderr[-3000:]
    assert "pip could not install" not in done.stderr, done.stderr[-3000:]
    merged = subprocess.run([sys.executable, "-m", "reconbench", "bench", str(GPU / "tiny.toml"), "--unpack",
                             str(out / "pack"), "--out", str(results)], env=env, capture_output=True, text=True,
                            timeout=300)
    assert merged.returncode == 0, merged.stderr[-3000:]
    cells = [json.loads(p.read_text()) for p in sorted((results / "cells").glob("*.json"))]
    assert len(cells) == 3 and all(c["status"] == "ok" for c in cells), [c["status"] for c in cells]
    assert all(0 < c["selections"]["pool"]["summary"]["mean_ssim_matched"] <= 1 for c in cells)
    probe = subprocess.run([sys.executable, str(GPU / "probe.py"), str(tmp_path / "probe.json"), "--tiny", "--device",
                            "cpu", "--only", "evaluation"], env=env, capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr[-3000:]
    rows = json.loads((tmp_path / "probe.json").read_text())
    assert "evaluation" in json.dumps(rows), rows
