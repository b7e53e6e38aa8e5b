"""The README's quick start, timed: ``reconbench run --attack multiclass_kkt`` in a fresh process, from an empty
target cache (so training is included), with ``OMP_NUM_THREADS=1``; wall seconds, the CPU seconds of the process
(``resource.getrusage(RUSAGE_CHILDREN)``) and the load average, with what the run did (from its result.json,
``reconbench.runs.readme_table.quick_start_facts``). README.md's two sentences on the quick start are rendered from
the JSON (``python -m reconbench.runs.readme_table --facts JSON``) and compared with it by tests/published/test_docs_numbers.py.

    RECONBENCH_DATA=... python benchmarks/quick_start.py --json benchmarks/results/quick_start.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    from reconbench.runs.readme_table import quick_start_facts

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, required=True, help="write the measurement here")
    ap.add_argument("--figure", type=Path, default=None,
                    help="copy the run's reconstructions figure here (README's docs/img/default-run-reconstructions.png)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="quick-start-") as tmp:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "RECONBENCH_CACHE": str(Path(tmp) / "cache")}
        load = os.getloadavg()[0]
        wall0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "reconbench", "run", "--attack", "multiclass_kkt", "-q"], cwd=tmp,
                       env=env, check=True)
        wall = time.perf_counter() - wall0
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        (result,) = Path(tmp).glob("runs/multiclass_kkt-gaussian-*/result.json")
        facts = quick_start_facts(json.loads(result.read_text()))
        if args.figure is not None:
            shutil.copyfile(result.parent / "figures" / "reconstructions.png", args.figure)
    record = {"command": "OMP_NUM_THREADS=1 reconbench run --attack multiclass_kkt",
              "timing": {"wall_seconds": wall, "cpu_seconds": usage.ru_utime + usage.ru_stime,
                         "cpus": os.cpu_count(), "load_average": load},
              "facts": facts}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
