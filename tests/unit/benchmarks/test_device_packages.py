"""What travels to the device machine: every runtime dependency of pyproject.toml is in the device image
(benchmarks/gpu/device_packages.txt) or among the wheels benchmarks/gpu/fetch_wheels.sh carries, as are the carried
packages' own requirements; slice.sh installs the wheels a Python lacks and stops in one line, before the probe, when
an import is missing. No network: the wheels' requirements are read from this environment's installed metadata."""

from __future__ import annotations

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


def runtime_requirements(pyproject: Path) -> list[Requirement]:
    return [Requirement(r) for r in tomllib.loads(pyproject.read_text())["project"]["dependencies"]]


def uncovered(reqs: list[Requirement], image: set[str], carried: dict[str, Version]) -> list[str]:
    """The requirements (for the device's Python) that neither the image nor the carried wheels meet: a name in
    neither, or a carried pin below the stated minimum."""
    out = []
    for r in reqs:
        if r.marker is not None and not r.marker.evaluate(DEVICE_MARKERS):
            continue
        name = canonicalize_name(r.name)
        if name in carried:
            if not r.specifier.contains(carried[name], prereleases=True):
                out.append(f"{r} (carried: {carried[name]})")
        elif name not in image:
            out.append(str(r))
    return out


def test_the_package_list_is_the_images_and_the_carried_wheels_are_not_in_it():
    image, carried = image_packages(), carried_pins()
    assert len(image) > 150 and {"torch", "numpy", "safetensors", "pluggy", "click"} <= image
    assert {"cattrs", "kornia", "kornia-rs", "attrs", "typing-extensions"} == set(carried)
    assert "cattrs" not in image and "kornia" not in image


def test_every_runtime_dependency_of_pyproject_travels_or_is_in_the_image():
    assert uncovered(runtime_requirements(ROOT / "pyproject.toml"), image_packages(), carried_pins()) == []


def test_a_new_dependency_in_neither_list_is_caught(tmp_path):
    """The check can fail: pyproject.toml with one more dependency the image lacks and no wheel carries."""
    text = (ROOT / "pyproject.toml").read_text().replace('dependencies = [\n', 'dependencies = [\n  "ujson>=5",\n', 1)
    (tmp_path / "pyproject.toml").write_text(text)
    assert uncovered(runtime_requirements(tmp_path / "pyproject.toml"), image_packages(), carried_pins()) == ["ujson>=5"]
    # and a carried pin below a stated minimum
    low = {**carried_pins(), "attrs": Version("20.1")}
    assert uncovered([Requirement("attrs>=25.4.0")], image_packages(), low) == ["attrs>=25.4.0 (carried: 20.1)"]


def test_the_carried_packages_own_requirements_travel_too():
    """Each carried package's runtime requirements (this environment's metadata of the pinned version, extras left
    out, markers of Python 3.12 on Linux) are met by the image or by another carried wheel: cattrs's attrs>=25.4
    and typing-extensions>=4.14, kornia's kornia-rs."""
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
