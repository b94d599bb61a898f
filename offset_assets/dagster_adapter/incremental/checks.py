"""Asset checks of incremental assets: offset age and backlog, from the control plane only.

Two checks per incremental asset, both plain SQL on the control plane (no Spark), so
they are cheap enough to run after every materialization and on a schedule of their
own (`schedules.build_offset_checks_schedule`):

- `offset_age`: per input, seconds since its offset last *advanced*
  (`OffsetStore.get_statistics`). WARN from `warn_after_s` (1 h), ERROR from
  `error_after_s` (24 h). An old offset means the transformation stopped running or its
  input stopped changing. The result tells which, per input: with nothing committed
  beyond the offset the input is *quiet* (`quiet_input.<input>` true, and said in the
  description): the transformation is not lagging, its input received nothing.
- `offset_backlog`: per input, the committed deltas (and the versions they hold) beyond
  the offset, from the delta catalog: work the transformation has not done yet. WARN
  above `max_backlog_versions` (0), ERROR above `error_backlog_versions` when given, and
  ERROR once the oldest of those commits is `error_backlog_age_s` old when given: a
  backlog that nothing picked up (automation off, runs failing) turns the asset red.
  A backlog shows only when the check runs, so schedule the checks on their own.

An input without an offset is fine while it has no committed data, and counts as
all-backlog (and a WARN in `offset_age`) once it has.
"""

# No `from __future__ import annotations`: Dagster inspects the decorated functions'
# annotations (the context type) at definition time, so they must not be strings.

import time
from collections.abc import Iterable

import dagster as dg

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.offsets import OffsetRepository
from offset_assets.dagster_adapter.asset_spec import IncrementalAsset, resolve_incremental
from offset_assets.dagster_adapter.offset_store import OffsetStore

DEFAULT_WARN_AFTER_S = 3600.0
DEFAULT_ERROR_AFTER_S = 86400.0

OFFSET_AGE_CHECK = "offset_age"
BACKLOG_CHECK = "offset_backlog"


def build_offset_checks(
    assets: dg.AssetsDefinition | Iterable[dg.AssetsDefinition],
    *,
    warn_after_s: float = DEFAULT_WARN_AFTER_S,
    error_after_s: float = DEFAULT_ERROR_AFTER_S,
    max_backlog_versions: int = 0,
    error_backlog_versions: int | None = None,
    error_backlog_age_s: float | None = None,
) -> list[dg.AssetChecksDefinition]:
    """The `offset_age` and `offset_backlog` checks of every incremental asset given
    (assets without an incremental spec are skipped). They need the `OffsetStore`
    resource under the key `offset_store`."""
    if not 0 <= warn_after_s <= error_after_s:
        raise ValueError(
            f"need 0 <= warn_after_s <= error_after_s, got {warn_after_s} and {error_after_s}"
        )
    if isinstance(assets, dg.AssetsDefinition):
        assets = [assets]
    checks: list[dg.AssetChecksDefinition] = []
    for assets_def in assets:
        for key in assets_def.keys:
            asset = resolve_incremental(assets_def, key)
            if asset is None:
                continue
            checks.append(_age_check(asset, warn_after_s, error_after_s))
            checks.append(_backlog_check(asset, max_backlog_versions, error_backlog_versions,
                                         error_backlog_age_s))
    return checks


def _age_check(asset: IncrementalAsset, warn_after_s: float,
               error_after_s: float) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=asset.asset_key,
        name=OFFSET_AGE_CHECK,
        description=(
            f"Seconds since each input's offset last advanced: WARN from {warn_after_s:g} s, "
            f"ERROR from {error_after_s:g} s (control plane only). An offset also stands still "
            "when its input receives nothing: such a quiet input (nothing committed beyond "
            "the offset, no backlog) is named in the result as quiet, not lagging."
        ),
    )
    def _check(offset_store: OffsetStore) -> dg.AssetCheckResult:
        return offset_age_result(offset_store.control_plane(), asset, warn_after_s, error_after_s)

    return _check


def _backlog_check(asset: IncrementalAsset, max_versions: int, error_versions: int | None,
                   error_age_s: float | None) -> dg.AssetChecksDefinition:
    limit = f", ERROR above {error_versions}" if error_versions is not None else ""
    if error_age_s is not None:
        limit += f", ERROR once a version has waited {error_age_s:g} s"
    @dg.asset_check(
        asset=asset.asset_key,
        name=BACKLOG_CHECK,
        description=(
            f"Committed input versions beyond the offsets: WARN above {max_versions}{limit} "
            "(control plane only)."
        ),
    )
    def _check(offset_store: OffsetStore) -> dg.AssetCheckResult:
        return backlog_result(offset_store.control_plane(), asset, max_versions, error_versions,
                              error_age_s)

    return _check


def offset_age_result(plane: ControlPlane, asset: IncrementalAsset, warn_after_s: float,
                      error_after_s: float, now: float | None = None) -> dg.AssetCheckResult:
    """The `offset_age` verdict: the worst input decides.

    The age is the offset's, so a quiet input (nothing committed beyond its offset) ages
    as much as one the transformation does not keep up with. The severity stays the
    age's either way: a source silent for `error_after_s` is itself worth a look (its
    producer may have stopped), and only the operator knows which sources may be quiet
    that long (raise `error_after_s` for them). What changes is the text: each old
    input says whether work waits for it (a lagging transformation) or nothing does
    (a quiet input), and `quiet_input.<input>` says it for every input with an offset."""
    now = time.time() if now is None else now
    stats = {
        row["input_table_name"]: row
        for row in OffsetRepository(plane).get_statistics(
            now, transformation_id=asset.transformation_id
        )
    }
    catalog = DeltaCatalog(plane)
    metadata: dict[str, dg.MetadataValue] = {
        "warn_after_s": dg.MetadataValue.float(float(warn_after_s)),
        "error_after_s": dg.MetadataValue.float(float(error_after_s)),
    }
    severity: dg.AssetCheckSeverity | None = None
    problems: list[str] = []
    for name in asset.input_tables:
        row = stats.get(name)
        if row is None:
            if catalog.last_committed(name) is not None:
                severity = severity or dg.AssetCheckSeverity.WARN
                problems.append(f"{name}: has committed data but no offset yet")
            metadata[f"offset_age_s.{name}"] = dg.MetadataValue.null()
            continue
        age = row["offset_age_seconds"]
        quiet = not catalog.committed_beyond(name, row["update_ts_offset"])
        metadata[f"offset_age_s.{name}"] = dg.MetadataValue.float(round(float(age), 1))
        metadata[f"offset.{name}"] = dg.MetadataValue.timestamp(row["update_ts_offset"])
        metadata[f"quiet_input.{name}"] = dg.MetadataValue.bool(quiet)
        why = (
            "a quiet input: nothing committed beyond the offset, the transformation is not lagging"
            if quiet else "committed data waits beyond the offset: the transformation is lagging"
        )
        if age >= error_after_s:
            severity = dg.AssetCheckSeverity.ERROR
            problems.append(f"{name}: offset {age:.0f} s old (error from {error_after_s:g} s), {why}")
        elif age >= warn_after_s:
            severity = severity or dg.AssetCheckSeverity.WARN
            problems.append(f"{name}: offset {age:.0f} s old (warn from {warn_after_s:g} s), {why}")
    return _verdict(severity, problems, metadata, "every input's offset is fresh")


def backlog_result(plane: ControlPlane, asset: IncrementalAsset, max_versions: int,
                   error_versions: int | None, error_age_s: float | None = None,
                   now: float | None = None) -> dg.AssetCheckResult:
    """The `offset_backlog` verdict: committed versions not yet covered by the offsets,
    and how long the oldest of them has waited (`backlog_age_s`)."""
    now = time.time() if now is None else now
    offsets = OffsetRepository(plane).get_offsets_for_transformation(asset.transformation_id)
    catalog = DeltaCatalog(plane)
    metadata: dict[str, dg.MetadataValue] = {}
    total = 0
    oldest: float | None = None
    for name in asset.input_tables:
        offset = offsets.get(name)
        beyond = catalog.committed_beyond(name, offset)
        versions = sum((d.rows_upserted or 0) + (d.rows_deleted or 0) for d in beyond)
        total += versions
        if beyond:
            first = min(d.commit_ts for d in beyond)
            oldest = first if oldest is None else min(oldest, first)
        metadata[f"backlog_deltas.{name}"] = dg.MetadataValue.int(len(beyond))
        metadata[f"backlog_versions.{name}"] = dg.MetadataValue.int(versions)
    metadata["backlog_versions"] = dg.MetadataValue.int(total)
    age = max(0.0, now - oldest) if oldest is not None else 0.0
    metadata["backlog_age_s"] = dg.MetadataValue.float(round(age, 1))
    severity = None
    stuck = error_age_s is not None and total > 0 and age >= error_age_s
    if stuck or (error_versions is not None and total > error_versions):
        severity = dg.AssetCheckSeverity.ERROR
    elif total > max_versions:
        severity = dg.AssetCheckSeverity.WARN
    problems = []
    if severity:
        problems.append(f"{total} committed input version(s) beyond the offsets")
    if stuck:
        problems.append(f"the oldest waiting {age:.0f} s (error from {error_age_s:g} s)")
    return _verdict(severity, problems, metadata, "no input versions beyond the offsets")


def _verdict(severity: dg.AssetCheckSeverity | None, problems: list[str],
             metadata: dict[str, dg.MetadataValue], ok: str) -> dg.AssetCheckResult:
    if severity is None:
        return dg.AssetCheckResult(passed=True, metadata=metadata, description=ok)
    return dg.AssetCheckResult(
        passed=False, severity=severity, metadata=metadata, description="; ".join(problems)
    )
