"""`offset-assets sql` from a shell: the command's whole wall time (process start, imports,
catalog, read, print) on each engine, over an existing state (the demo's by default).

    .venv/bin/python -m bench.sql_command [--home STATE] [--repeat N] [--query SQL] [--out PATH]

Each repetition runs the installed command once per engine, alternating, so a busy
machine weighs on both alike; the report has each engine's median and fastest run and
checks that both printed the same rows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

QUERY = "SELECT count(*) FROM posts FOR SYSTEM_TIME AS OF DELTA_NUM 1"
ENGINES = ("duckdb", "spark")


def run_once(home: str, engine: str, query: str) -> tuple[float, str]:
    """Seconds of one `offset-assets sql --engine ENGINE QUERY` over the state in `home`, and what it printed."""
    command = [str(Path(sys.executable).parent / "offset-assets"), "sql", query, "--engine", engine, "--format", "csv"]
    start = time.perf_counter()
    done = subprocess.run(command, env={**os.environ, "OFFSET_ASSETS_HOME": home}, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{engine}: {done.stderr.strip()}")
    return seconds, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=os.environ.get("OFFSET_ASSETS_HOME", "state"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--query", default=QUERY)
    parser.add_argument("--out", default="bench/out/sql_command.json")
    args = parser.parse_args()
    seconds: dict[str, list[float]] = {engine: [] for engine in ENGINES}
    printed: dict[str, str] = {}
    for _ in range(args.repeat):
        for engine in ENGINES:
            took, printed[engine] = run_once(args.home, engine, args.query)
            seconds[engine].append(round(took, 2))
    report = {
        "query": args.query,
        # The values: a column the query does not name is named by each engine its own way.
        "same_rows": printed["duckdb"].splitlines()[1:] == printed["spark"].splitlines()[1:],
        "rows": printed["duckdb"],
        **{engine: {"median_s": statistics.median(s), "min_s": min(s), "runs_s": s} for engine, s in seconds.items()},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
