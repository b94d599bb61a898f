"""`offset-assets init-offsets`: switch an existing transformation to offsets."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import click

from offset_assets.cli.base import clear_errors, main, open_control_plane
from offset_assets.cli.offsets import iso_utc, require_known
from offset_assets.config import default_warehouse
from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.offsets import OffsetRepository

# The engine and Spark are imported by the command that uses them: every command of the
# CLI loads this module, and `show` or `sql` must not pay for PySpark's import.
if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from offset_assets.versioned.table import VersionedTable

JVM_LOG = Path(tempfile.gettempdir()) / "offset-assets-cli-spark.log"
QUIET_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %p %c{1}: %m%n
"""


def _registered(spark: SparkSession, plane: ControlPlane, name: str, warehouse: str) -> VersionedTable:
    from offset_assets.engine.errors import TransformationDefinitionError
    from offset_assets.versioned.registered import open_registered_table

    table = open_registered_table(spark, plane, name, warehouse)
    if table is None:
        raise TransformationDefinitionError(f"table {name!r} is not registered in the delta catalog")
    return table


def _parse_reference(text: str) -> tuple[str, str, str]:
    try:
        table, pair = text.split(":", 1)
        primary_col, reference_col = pair.split("=", 1)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not TABLE:PRIMARY_COL=REFERENCE_COL") from None
    return table, primary_col, reference_col


def _not_runnable(**_frames):  # noqa: ANN202
    from offset_assets.engine.errors import TransformationDefinitionError

    raise TransformationDefinitionError("a transformation rebuilt by the CLI can only initialise offsets")


@main.command("init-offsets")
@click.argument("transformation")
@click.option("--input", "inputs", multiple=True,
              help="A primary input table (default: the inputs that already have offsets).")
@click.option("--reference", "references", multiple=True,
              help="A reference input as TABLE:PRIMARY_COL=REFERENCE_COL (reverse join).")
@click.option("--warehouse", envvar="OFFSET_ASSETS_WAREHOUSE", default=None, help="Warehouse root.")
@click.pass_obj
@clear_errors
def init_offsets(obj: dict, transformation: str, inputs: tuple[str, ...], references: tuple[str, ...],
                 warehouse: str | None) -> None:
    """Set TRANSFORMATION's offsets from its meta so that enabling offsets redoes no work.

    Never lowers an existing offset. Inputs default to those that already have offsets.
    """
    from offset_assets.engine import IncrementalEngine
    from offset_assets.engine.errors import TransformationDefinitionError
    from offset_assets.engine.transformation import Transformation, TransformInput, meta_table_name

    plane = open_control_plane(obj)
    require_known(plane, transformation)
    warehouse = warehouse or default_warehouse()
    refs = [_parse_reference(text) for text in references]
    ref_names = {table for table, _, _ in refs}
    primary = list(inputs) or [
        name for name in OffsetRepository(plane).get_offsets_for_transformation(transformation)
        if name not in ref_names
    ]
    if not primary:
        raise TransformationDefinitionError(
            f"transformation {transformation!r} has no offsets yet: name its inputs with --input"
        )
    spark = quiet_spark_session()
    meta = _registered(spark, plane, meta_table_name(transformation), warehouse)
    definition = Transformation(
        transformation_id=transformation,
        inputs=[TransformInput(_registered(spark, plane, name, warehouse)) for name in primary]
        + [TransformInput(_registered(spark, plane, table, warehouse), join_keys={p: r})
           for table, p, r in refs],
        transform_keys=meta.primary_key,
        outputs=[meta],
        func=_not_runnable,
    )
    found = IncrementalEngine(spark, plane).initialize_offsets_from_transform_meta(definition)
    if not found:
        click.echo(f"{transformation}: no successful meta or empty inputs; no offset set")
        return
    click.echo(f"{transformation}: offsets set from its meta (an existing larger offset is kept)")
    for name, value in sorted(found.items()):
        click.echo(f"  {name:<24} {iso_utc(value)}")


def quiet_spark_session() -> SparkSession:
    """A Spark session for a command line: its JVM writes to a log file, not the terminal.

    The driver JVM prints start-up warnings before any Python code could lower its log
    level, and keeps the standard error it was started with, so it is started with its
    standard error pointing at `JVM_LOG` (errors still reach Python as exceptions) and
    a log4j2 configuration that keeps errors only; no progress bars."""
    from offset_assets.spark import get_spark_session

    config = Path(tempfile.gettempdir()) / "offset-assets-cli-log4j2.properties"
    config.write_text(QUIET_LOG4J2)
    conf = {
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={config.as_uri()}",
    }
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with JVM_LOG.open("ab") as log:
            os.dup2(log.fileno(), 2)
            return get_spark_session(app_name="offset-assets-cli", conf=conf)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
