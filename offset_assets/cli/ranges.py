"""`offset-assets ranges plan ASSET`: an ingestion asset's due ranges, ready to run from a shell.

Id, Kafka and upstream ranges are dynamic partitions: Dagster knows a range only once it
was added to its instance, which the asset's sensor does as it plans. This command plans
as the sensor does (job_log and the source, never Spark), adds the due ranges'
partitions to the instance (`DAGSTER_HOME`, the one `dagster dev` and the daemon use)
and prints one `dagster asset materialize` command per range, in run order. Time-window
partitions exist already; their due windows are printed the same way.

The Definitions are loaded as `dagster` loads them: the module `--definitions` names,
else `[tool.dagster] module_name` of ./pyproject.toml, imported from the working
directory. The control plane is the one their `offset_store` resource names (what the
sensor and the runs use); like a sensor's first tick, planning the first range creates it.
"""

from __future__ import annotations

import importlib
import os
import shlex
import sys
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from offset_assets.cli.base import clear_errors, main
from offset_assets.config import default_db_url
from offset_assets.errors import OffsetAssetsError

if TYPE_CHECKING:
    import dagster as dg

DAGSTER_HOME = "DAGSTER_HOME"
OFFSET_STORE_KEY = "offset_store"


class DefinitionsError(OffsetAssetsError):
    """The Definitions module cannot be found or loaded, or lacks what the command needs."""


class NotAnIngestionAssetError(OffsetAssetsError):
    """The asset named is not in the Definitions, or was not built by `ingestion_asset`."""


def definitions_module(option: str | None, project: Path) -> str:
    """The module holding the Definitions: `option`, else `[tool.dagster] module_name` of
    `project`/pyproject.toml (as `dagster` itself reads it)."""
    if option:
        return option
    pyproject = project / "pyproject.toml"
    if pyproject.is_file():
        with pyproject.open("rb") as file:
            name = tomllib.load(file).get("tool", {}).get("dagster", {}).get("module_name")
        if name:
            return name
    raise DefinitionsError(
        f"no Definitions module: pass --definitions MODULE, or run where a pyproject.toml "
        f"has [tool.dagster] module_name (looked in {pyproject})"
    )


def load_definitions(module_name: str, project: Path) -> dg.Definitions:
    """The one `dg.Definitions` object at the top level of `module_name`, or what its one
    `@dg.definitions` function returns (a components project's `definitions.py`), imported
    with `project` on the import path as `dagster -m` does."""
    import dagster as dg
    from dagster.components.definitions import LazyDefinitions

    if str(project) not in sys.path:
        sys.path.insert(0, str(project))
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module failed to load: say which and why, in one line
        first_line = (str(exc).strip() or type(exc).__name__).splitlines()[0]
        raise DefinitionsError(f"cannot load Definitions module {module_name!r}: "
                               f"{type(exc).__name__}: {first_line}") from exc
    found = {name: value for name, value in vars(module).items()
             if isinstance(value, dg.Definitions | LazyDefinitions)}
    if len(found) != 1:
        names = ", ".join(sorted(found)) or "none"
        raise DefinitionsError(f"module {module_name!r} must hold exactly one dagster Definitions object "
                               f"or @dg.definitions function at its top level (found: {names})")
    (name, defs), = found.items()
    if isinstance(defs, LazyDefinitions):
        try:
            return defs()
        except dg.DagsterInvariantViolationError as exc:  # a function that wants a component's context
            raise DefinitionsError(f"{module_name}.{name}: {exc}") from None
    return defs


def ingestion_assets(defs: dg.Definitions) -> dict[str, tuple[dg.AssetsDefinition, Any]]:
    """The ingestion assets of `defs` by user key, with the `IngestionJob` each was built from."""
    from offset_assets.dagster_adapter.ingestion.assets import ingestion_job_of

    found = {}
    for key in defs.resolve_all_asset_keys():
        assets_def = defs.resolve_assets_def(key)
        job = ingestion_job_of(assets_def)
        if job is not None:
            found[key.to_user_string()] = (assets_def, job)
    return found


def materialize_command(module_name: str, asset: str, partition_key: str) -> str:
    return shlex.join(["dagster", "asset", "materialize", "-m", module_name,
                       "--select", asset, "--partition", partition_key])


def _control_plane_url(defs: dg.Definitions, module_name: str, obj: dict[str, Any]) -> str:
    import dagster as dg

    store = (defs.resources or {}).get(OFFSET_STORE_KEY)
    if store is None:
        raise DefinitionsError(f"the Definitions of {module_name!r} have no {OFFSET_STORE_KEY!r} resource "
                               "(the control plane their ingestion sensors read)")
    with dg.build_resources({OFFSET_STORE_KEY: store}) as resources:
        url = getattr(resources, OFFSET_STORE_KEY).db_url or default_db_url()
    if not obj["db_url_is_default"] and obj["db_url"] != url:
        raise DefinitionsError(f"--db-url {obj['db_url']} is not the control plane of the Definitions' "
                               f"{OFFSET_STORE_KEY!r} resource ({url}), which their runs use: omit it")
    return url


@main.group("ranges")
def ranges_group() -> None:
    """Log-driven ranges of ingestion assets, for Dagster runs launched from a shell."""


@ranges_group.command("plan")
@click.argument("asset")
@click.option("--definitions", "-m", "module_name", default=None,
              help="Module holding the Dagster Definitions (default: [tool.dagster] module_name "
                   "of ./pyproject.toml).")
@click.option("--limit", "-n", type=click.IntRange(min=1), default=None,
              help="Print the first N commands only (every due range is added all the same).")
@click.pass_obj
@clear_errors
def plan_command(obj: dict[str, Any], asset: str, module_name: str | None, limit: int | None) -> None:
    """Plan ASSET's due ranges (job_log and the source, as its sensor does), add them as
    partitions in the Dagster instance of $DAGSTER_HOME, and print the command that runs
    each, in the order they must run (each range waits for the one before)."""
    import dagster as dg

    from offset_assets.control_plane.database import connect
    from offset_assets.dagster_adapter.ingestion.sensor import plan_range_partitions

    project = Path.cwd()
    module_name = definitions_module(module_name, project)
    defs = load_definitions(module_name, project)
    assets = ingestion_assets(defs)
    if asset not in assets:
        known = ", ".join(sorted(assets)) or "none"
        raise NotAnIngestionAssetError(
            f"{asset!r} is not an ingestion asset of {module_name!r} (ingestion assets: {known})")
    assets_def, job = assets[asset]
    if not os.environ.get(DAGSTER_HOME):
        raise DefinitionsError(
            f"{DAGSTER_HOME} is not set: the partitions are added to a Dagster instance, so set it to "
            "the folder of the instance your runs use (the one `dagster dev` or the daemon uses)")
    plane = connect(_control_plane_url(defs, module_name, obj))
    with dg.DagsterInstance.get() as instance:
        keys = plan_range_partitions(job, assets_def.partitions_def, plane, instance)
    if not keys:
        click.echo(f"{asset}: no range is due (job_log and the source have nothing new)", err=True)
        return
    dynamic = isinstance(assets_def.partitions_def, dg.DynamicPartitionsDefinition)
    where = (f"partitions of {assets_def.partitions_def.name!r} in the Dagster instance at "
             f"{os.environ[DAGSTER_HOME]}" if dynamic else "time-window partitions")
    shown = keys[:limit]
    click.echo(f"{asset}: {len(keys)} range(s) due, {where}; run them in this order, each "
               f"waits for the one before{'' if len(shown) == len(keys) else f' (first {len(shown)})'}:",
               err=True)
    for key in shown:
        click.echo(materialize_command(module_name, asset, key))
