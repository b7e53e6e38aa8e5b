"""Where suite files live and how one is found and read: a project's ./suites, then the suites shipped with
reconbench."""

from __future__ import annotations

import difflib
from pathlib import Path

from reconbench.errors import ReconbenchError

#: the suites shipped with the package (``reconbench bench ci`` works from any folder, installed or not)
SHIPPED_SUITES = Path(__file__).resolve().parents[1] / "suites"

#: a project's own suites, looked up first, relative to the working folder
LOCAL_SUITES = Path("suites")


class SuiteError(ReconbenchError):
    """A suite file that cannot be used: the message names the file, the line and the key."""


def suite_search_path() -> list[Path]:
    """Folders searched for ``NAME.toml``: ./suites (a project's own), then the suites shipped with reconbench."""
    here = Path.cwd() / LOCAL_SUITES
    return [SHIPPED_SUITES] if here.resolve() == SHIPPED_SUITES else [here, SHIPPED_SUITES]


def find_suite(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        if p.is_dir():
            inside = sorted(f.name for f in p.glob("*.toml"))[:3]
            raise SuiteError(f"suite file {p} is a folder; pass a suite's .toml file"
                             + (f" (in it: {', '.join(inside)})" if inside else "") + " or a suite name")
        if not p.is_file():
            raise SuiteError(f"suite file {p} does not exist")
        return p
    for folder in suite_search_path():
        cand = folder / f"{name_or_path}.toml"
        if cand.is_file():
            return cand
    known = sorted({f.stem for d in suite_search_path() if d.is_dir() for f in d.glob("*.toml")})
    close = difflib.get_close_matches(name_or_path, known, n=3, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise SuiteError(
        f"no suite named {name_or_path!r}.{hint} Known suites: {', '.join(known) or '(none)'} "
        f"(in {', '.join(str(d) for d in suite_search_path())}); or pass a path to a .toml file."
    )


def display_path(path: Path) -> str:
    """A suite path for people: relative to the working folder or the source checkout when inside one."""
    resolved = path.resolve()
    for base in (Path.cwd(), Path(__file__).resolve().parents[3]):
        try:
            return str(resolved.relative_to(base.resolve()))
        except ValueError:
            continue
    return str(path)


def read_suite_text(path: Path) -> str:
    """The suite file's text; a file that is not UTF-8 text (a binary, say) is refused with its first bad byte."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SuiteError(f"{display_path(path)} is not a text file (byte {raw[exc.start]:#04x} at offset {exc.start} is "
                         "not UTF-8); a suite is a TOML file like reconbench/bench/suites/ci.toml") from None
