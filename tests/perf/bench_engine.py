"""Engine micro-benchmark: activities per second, in-process, no I/O.

Run with ``python -m tests.perf.bench_engine``; prints a table and writes var/bench/engine.json.
The scenarios live in ``tests.perf.bench.engine`` (``make bench`` runs them too). Not a test:
pytest collects nothing here (no ``test_`` names).
"""

from __future__ import annotations

import json

from tests.perf.bench.engine import five_steps, fork_join, loop_of, measure, measure_all
from tests.support.services import PROJECT_ROOT

__all__ = ["five_steps", "fork_join", "loop_of", "main", "measure"]


def main() -> None:
    rows = measure_all()
    print(f"{'scenario':<22} {'act/run':>8} {'runs/s':>10} {'activities/s':>14}")
    for row in rows:
        print(
            f"{row['scenario']:<22} {row['activities_per_run']:>8} "
            f"{row['runs_per_second']:>10} {row['activities_per_second']:>14}"
        )
    out = PROJECT_ROOT / "var" / "bench" / "engine.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"engine": rows}, indent=2) + "\n")
    print(f"wrote {out.relative_to(PROJECT_ROOT)}")


if __name__ == "__main__":
    main()
