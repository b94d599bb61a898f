"""A fresh Spark driver's start, with and without the class archive
(`offset_assets/class_archive.py`).

Each measurement is a new Python process, so a new JVM: the session's start
(`get_spark_session`, `local[2]`, the client compiler and the serial collector as the
demo's driver has them) and its first queries (1,000 rows written to Parquet, read back,
filtered, grouped and counted). The two kinds take turns, `--rounds` of each, so that a
busy moment of the machine falls on both. The archive is the installation's
(`offset-assets class-archive`, which `make` builds).

    .venv/bin/python -m bench.startup [--rounds 5] [--out bench/out/startup.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from offset_assets.class_archive import ENV_CLASS_ARCHIVE, OFF, configured_class_archive

OUT = Path(__file__).parent / "out" / "startup.json"
KINDS = {"without the archive": OFF, "with the archive": None}


def child() -> None:
    """One fresh driver: print its start's and first queries' seconds as JSON."""
    started = time.perf_counter()
    from offset_assets.spark import SHORT_JVM_OPTIONS, get_spark_session

    spark = get_spark_session(master="local[2]", app_name="offset-assets-startup", conf={
        "spark.driver.extraJavaOptions": SHORT_JVM_OPTIONS, "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false"})
    session = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="offset-assets-startup-") as folder:
        path = f"{folder}/rows.parquet"
        spark.range(1000).selectExpr("id", "CAST(id % 7 AS STRING) AS s").write.parquet(path)
        groups = spark.read.parquet(path).where("id > 10").groupBy("s").count().count()
    queried = time.perf_counter()
    spark.stop()
    print(json.dumps({"start_s": session - started, "first_queries_s": queried - session, "groups": groups}))


def measure(archive: str | None) -> dict:
    env = dict(os.environ)
    if archive is None:
        env.pop(ENV_CLASS_ARCHIVE, None)
    else:
        env[ENV_CLASS_ARCHIVE] = archive
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "bench.startup", "--child"], env=env, capture_output=True,
                          text=True, check=True)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    report["process_s"] = time.perf_counter() - started
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child()
        return
    archive = configured_class_archive()
    if archive is None or not archive.is_file():
        raise SystemExit(f"no class archive at {archive}: build it with `offset-assets class-archive`")
    runs: dict[str, list[dict]] = {kind: [] for kind in KINDS}
    for _ in range(args.rounds):
        for kind, setting in KINDS.items():
            runs[kind].append(measure(setting))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).resolve().parent.parent,
                            capture_output=True, text=True).stdout.strip() or None
    report = {"commit": commit, "archive": str(archive), "archive_mb": round(archive.stat().st_size / 2**20),
              "rounds": args.rounds, "kinds": {}}
    for kind, measured in runs.items():
        report["kinds"][kind] = {
            key: {"median": round(statistics.median(m[key] for m in measured), 2),
                  "min": round(min(m[key] for m in measured), 2), "max": round(max(m[key] for m in measured), 2)}
            for key in ("start_s", "first_queries_s", "process_s")}
        print(kind, json.dumps(report["kinds"][kind]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
