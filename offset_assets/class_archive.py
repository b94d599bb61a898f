"""Spark's classes from one file: a class-data-sharing archive for the driver's JVM.

Before its first query a Spark driver loads thousands of classes, each found among the
~250 jars of the pyspark wheel, read and verified. A JVM started with an archive of them
(Java's application class-data sharing) maps them from one file instead. Measured on the
2-core machine (`bench/startup.py`, medians of 5), a local session's start took 4.12 s
without it and 2.23 s with it, its first queries 4.03 s and 2.05 s. Every Dagster run
with a Spark driver of its own starts such a JVM.

The archive is built once per installation (`offset-assets class-archive`; `make dev`
builds it after installing) and looked up at `OFFSET_ASSETS_CLASS_ARCHIVE`
(default: inside the Python environment, `<sys.prefix>/share/offset-assets/
spark-classes.jsa`; `off` turns it off). A JVM whose class path or Java build differ from
those the archive was built with starts without it, silently: the archive only ever
saves time, it never changes what runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ENV_CLASS_ARCHIVE = "OFFSET_ASSETS_CLASS_ARCHIVE"
OFF = "off"
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
# Options by which a caller chooses class sharing itself: its choice is kept.
_SHARING_OPTIONS = ("-XX:SharedArchiveFile", "-Xshare", "-XX:ArchiveClassesAtExit")


def default_class_archive() -> Path:
    """The archive of this Python environment (one per installed pyspark wheel)."""
    return Path(sys.prefix) / "share" / "offset-assets" / "spark-classes.jsa"


def configured_class_archive() -> Path | None:
    """Where the archive is looked up: `OFFSET_ASSETS_CLASS_ARCHIVE`, else the default;
    None when the variable says `off` (or is empty)."""
    value = os.environ.get(ENV_CLASS_ARCHIVE)
    if value is None:
        return default_class_archive()
    if value.strip().lower() in ("", OFF):
        return None
    return Path(value).expanduser()


def class_archive_options() -> str:
    """The JVM options that start a JVM with the archive; empty when there is none (not
    built, turned off, or at a path with white space, which Spark's launchers would split)."""
    path = configured_class_archive()
    if path is None or not path.is_file() or any(c.isspace() for c in str(path)):
        return ""
    # A JVM that cannot use the archive says so on every start: its messages are off.
    return f"-XX:SharedArchiveFile={path} -Xlog:cds=off -Xlog:cds+dynamic=off"


def with_class_archive(java_options: str | None) -> str:
    """`java_options` and the archive's options, unless they choose class sharing themselves."""
    options = (java_options or "").strip()
    if any(option in options for option in _SHARING_OPTIONS):
        return options
    return " ".join(part for part in (options, class_archive_options()) if part)


def with_driver_class_archive(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Spark settings for a driver in this process, its JVM started with the archive when
    there is one (`spark.driver.extraJavaOptions` extended; the rest as given)."""
    options = with_class_archive(settings.get(DRIVER_JAVA_OPTIONS))
    return {**settings, DRIVER_JAVA_OPTIONS: options} if options else dict(settings)
