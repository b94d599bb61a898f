"""Building the class archive (`offset_assets.class_archive`): a child Python process
starts a local Spark driver whose JVM writes, when it exits, every class it loaded into
the archive (Java's `-XX:ArchiveClassesAtExit`). Before that the child runs the engine's
throwaway story (`story.py`), so the archive holds the classes a run needs. (Classes of
generated code are not archived, and Janino's jar is signed, which the JVM does not
archive either: a story run with compiled expressions would add nothing.)

The child's JVM is started by pyspark's own launcher, so the archive records the class
path every Spark JVM of this installation starts with (a local driver, a Connect server,
a standalone master, worker or executor). It is written beside its final path and moved
there whole: a JVM never maps half an archive.

    python -m offset_assets.startup.class_archive_build PATH    # the child (internal)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from offset_assets.class_archive import ENV_CLASS_ARCHIVE, OFF
from offset_assets.errors import OffsetAssetsError

BUILD_TIMEOUT_S = 600.0
OUTPUT_TAIL_LINES = 20


class ClassArchiveError(OffsetAssetsError):
    """The class archive could not be built (the path, and what the child said)."""


def build_class_archive(path: Path, timeout_s: float = BUILD_TIMEOUT_S) -> float:
    """Build the archive at `path`, replacing one there; its seconds."""
    started = time.monotonic()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    # The child's JVM must not map an archive while it writes one.
    env = {**os.environ, ENV_CLASS_ARCHIVE: OFF}
    try:
        child = subprocess.run([sys.executable, "-m", __name__, str(partial)], env=env, capture_output=True,
                               text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        partial.unlink(missing_ok=True)
        raise ClassArchiveError(f"class archive {path}: the building process took over {timeout_s:.0f} s") from exc
    if child.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
        partial.unlink(missing_ok=True)
        said = "\n".join((child.stdout + child.stderr).strip().splitlines()[-OUTPUT_TAIL_LINES:])
        raise ClassArchiveError(f"class archive {path}: the building process exited with {child.returncode} "
                                f"and wrote {'no archive' if not partial.is_file() else 'an empty one'}:\n{said}")
    os.replace(partial, path)
    return time.monotonic() - started


def _write_archive(partial: Path) -> None:
    """The child: a local driver whose JVM archives its classes at exit, after the story."""
    from offset_assets.spark import SHORT_JVM_OPTIONS, get_spark_session
    from offset_assets.startup.story import run_story

    spark = get_spark_session(master="local[2]", app_name="offset-assets-class-archive", conf={
        "spark.driver.extraJavaOptions": f"{SHORT_JVM_OPTIONS} -XX:ArchiveClassesAtExit={partial} -Xlog:cds=off "
                                         "-Xlog:cds+dynamic=off",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
    })
    with tempfile.TemporaryDirectory(prefix="offset-assets-class-archive-") as folder:
        run_story(spark, folder, incremental_runs=1)
    spark.stop()


if __name__ == "__main__":
    _write_archive(Path(sys.argv[1]))
