"""Which carried wheels this Python needs: prints, one a line, each wheel of a folder whose distribution is not
installed here or is installed at an older version than the wheel's (benchmarks/gpu/slice.sh installs the folder's
wheels when this prints anything). The standard library only (plus ``packaging`` where present): it runs before
anything is installed.

    python3 benchmarks/gpu/carried_wheels.py .whl
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def older(installed: str, carried: str) -> bool:
    """Whether ``installed`` is an older version than ``carried`` (False where they cannot be compared)."""
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:   # the image has packaging; without it an installed version counts as recent enough
        return False
    try:
        return Version(installed) < Version(carried)
    except InvalidVersion:
        return False


def needed(folder: Path) -> list[str]:
    """'NAME VERSION (why)' for each wheel of ``folder`` this Python lacks or holds older."""
    out = []
    for wheel in sorted(folder.glob("*.whl")):
        name, carried = wheel.name.split("-")[:2]   # a wheel's file name: NAME-VERSION-...whl (PEP 427)
        try:
            have = version(name)
        except PackageNotFoundError:
            out.append(f"{name} {carried} (not installed)")
            continue
        if older(have, carried):
            out.append(f"{name} {carried} (installed: {have})")
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} WHEEL_FOLDER")
    print("\n".join(needed(Path(sys.argv[1]))))
