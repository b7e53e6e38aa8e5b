"""No test asks for more agreement than float64 rounding can deliver on another processor's kernels.

Every literal tolerance in the tests is read from the source: a relative tolerance below 1e-14 (about 45 units in the
last place of float64) holds only for single elementwise operations, and an absolute bound below 1e-15 in a comparison
holds only where a kernel happens to round to exactly zero. Either needs a ``# tolerance:`` comment on its line that
says why the computation delivers it; the check below refuses any other.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
RELATIVE_FLOOR = 1e-14
ABSOLUTE_FLOOR = 1e-15
RELATIVE_NAMES = {"rtol", "rel"}


def _number(node: ast.AST) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return float(node.value)
    return None


def too_tight(source: str) -> list[tuple[int, str]]:
    """(line, what) for every literal tolerance below the floors, unless its line carries a ``# tolerance:`` reason."""
    lines = source.splitlines()
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.keyword) and node.arg in RELATIVE_NAMES:
            value = _number(node.value)
            if value is not None and 0 < value < RELATIVE_FLOOR:
                found.append((node.value.lineno, f"{node.arg}={value:g}"))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Lt | ast.LtE):
            value = _number(node.comparators[0])
            if value is not None and 0 < value < ABSOLUTE_FLOOR:
                found.append((node.lineno, f"< {value:g}"))
            elif isinstance(node.comparators[0], ast.BinOp) and isinstance(node.comparators[0].op, ast.Mult):
                factor = _number(node.comparators[0].left)
                if factor is not None and 0 < factor < ABSOLUTE_FLOOR:
                    found.append((node.lineno, f"< {factor:g} * ..."))
    return [(line, what) for line, what in found if "# tolerance:" not in lines[line - 1]]


def test_the_scan_catches_tolerances_below_rounding():
    # the too-tight literals are assembled from exponents, so that this file holds none itself
    a, b, c, d = (f"1e-{k}" for k in (20, 18, 16, 30))
    bad = f"assert x < {a} * theta_sq\nassert y < {b}\nassert z == pytest.approx(1.0, rel={c})\n"
    assert [what for _, what in too_tight(bad)] == [f"< {a} * ...", f"< {b}", f"rel={c}"]
    fine = f"assert x < 64 * eps * theta_sq\nassert z == pytest.approx(1.0, rel=1e-12)\nassert y < {d}  # tolerance: exact\n"
    assert too_tight(fine) == []


def test_no_test_tolerance_is_below_float64_rounding():
    offending = [f"{path.relative_to(TESTS.parent)}:{line}: {what}"
                 for path in sorted(TESTS.rglob("*.py")) if path.name != Path(__file__).name
                 for line, what in too_tight(path.read_text())]
    assert offending == [], "tolerances below float64 rounding (loosen, or say why with '# tolerance:'): " + "; ".join(offending)
