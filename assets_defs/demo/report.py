"""The demo's report: what each run processed, and why, in a page a person can read."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from assets_defs.assets.transformations import TRANSFORMATIONS
from assets_defs.demo.story import DemoStory, MaterializationPass
from offset_assets.config import state_dir


def _clock(ts: float | None) -> str:
    if ts is None:
        return "none"
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M:%S.%f")[:-3]


def _day(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _ingested_line(asset: str, key: str, meta: dict[str, Any]) -> str:
    versions = meta.get("rows_upserted", 0) + meta.get("rows_deleted", 0)
    what = f"{meta.get('rows_read', 0)} rows read -> {meta.get('rows_upserted', 0)} upserted"
    if meta.get("rows_deleted"):
        what += f", {meta['rows_deleted']} deleted"
    if meta.get("rows_unchanged"):
        what += f", {meta['rows_unchanged']} unchanged"
    delta = f" (delta {meta['delta_num']})" if versions else " (no new version, no delta)"
    return f"   {asset + ' ' + key:<28} {what}{delta}"


def _ingestion(step: MaterializationPass) -> list[str]:
    return [_ingested_line(r.asset, r.partition_key, r.metadata) for r in step.ingested]


def _reads(meta: dict[str, Any]) -> str:
    reads = [f"{k.removeprefix('rows_read.')} {v}" for k, v in sorted(meta.items()) if k.startswith("rows_read.")]
    return ", ".join(reads)


def _offsets(before: Iterable[dict], after: Iterable[dict]) -> list[str]:
    earlier = {(r["transformation_id"], r["input_table_name"]): r["update_ts_offset"] for r in before}
    lines = []
    for row in after:
        key = (row["transformation_id"], row["input_table_name"])
        lines.append(
            f"   {key[0]:<16} {key[1]:<15} {_clock(earlier.get(key))} -> {_clock(row['update_ts_offset'])}"
            f"   age {row['offset_age_seconds']:.1f} s"
        )
    return lines


MODERATED_OUTPUTS = ("accepted_posts", "rejected_posts")


def _moderated(step: MaterializationPass, expected_keys: int, what: str,
               ok: Callable[[int, int], str]) -> str:
    """`moderated_posts`: one transformation, two outputs; an output the run left as it was
    is reported as an observation, not a materialization, so it has no entry here."""
    outputs = {name: step.transformations.get(name) for name in MODERATED_OUTPUTS}
    processed = next((meta["processed_keys"] for meta in outputs.values() if meta), None)
    if processed is None:
        return "   moderated_posts  no output changed (observed, not materialized: nothing downstream woken)"
    changes = [f"{name} unchanged" if meta is None else
               f"{name} {meta[f'rows_written.{name}']} written, {meta[f'rows_deleted.{name}']} deleted"
               for name, meta in outputs.items()]
    return (f"   moderated_posts  processed {processed} keys ({ok(processed, expected_keys)}: {what}) -> "
            + "; ".join(changes))


def _engine_times(step: MaterializationPass) -> str:
    """Each transformation's own time in the pass (its `duration_s`) and Spark jobs (not
    counted over Spark Connect): a multi-asset's outputs report one run."""
    times = []
    for t in TRANSFORMATIONS:
        meta = next((step.transformations[key.to_user_string()] for key in t.keys
                     if key.to_user_string() in step.transformations), None)
        if meta is None:
            continue
        jobs = meta.get("profile.spark_jobs")
        counted = f" ({jobs} Spark jobs)" if jobs is not None else ""
        times.append(f"{t.node_def.name} {meta['duration_s']:.2f} s{counted}")
    return ", ".join(times)


def render(story: DemoStory) -> str:
    sizes, traffic, expected = story.sizes, story.traffic, story.expected
    first, second = story.first, story.second
    enriched1, stats1 = first.transformations["enriched_posts"], first.transformations["user_post_stats"]
    enriched2, stats2 = second.transformations["enriched_posts"], second.transformations["user_post_stats"]
    live_after = story.live_posts + sizes.inserts - sizes.deletes
    runs = len(first.run_ids) + len(second.run_ids)
    renames = ", ".join(f"user {uid}: {old} -> {new}" for uid, (old, new) in story.renamed.items())
    ok = lambda actual, wanted: "as expected" if actual == wanted else f"EXPECTED {wanted}"  # noqa: E731
    passed = sum(1 for *_, p, _ in second.checks if p)
    lines = [
        "offset-assets demo: incremental Dagster assets on Spark, by offsets",
        f"state {state_dir()}  |  Dagster instance {os.environ.get('DAGSTER_HOME', '?')}",
        f"Reset the demo state: removed {', '.join(p.name for p in story.removed) or 'nothing (fresh)'}"
        " (Dagster run history kept)",
        "",
        f"Source: {sizes.users} profiles, {sizes.posts} posts, stamped {_day(story.clock.seed_at)}",
        "",
        f"1. First materialization ({len(first.run_ids)} Dagster runs)",
        *_ingestion(first),
        f"   enriched_posts   processed {enriched1['processed_keys']} keys "
        f"({ok(enriched1['processed_keys'], story.live_posts)}: every post); read {_reads(enriched1)}",
        f"   user_post_stats  processed {stats1['processed_keys']} keys "
        f"({ok(stats1['processed_keys'], story.authors)}: every author)",
        _moderated(first, story.live_posts, "every post", ok),
        "",
        f"2. Traffic (seed {sizes.traffic_seed}, stamped {_day(story.clock.traffic_at)}): "
        f"{sizes.changes} changes = {traffic.describe()}",
        f"   renamed {renames}" if renames else "   no profile renamed",
        "",
        f"3. Second materialization ({len(second.run_ids)} Dagster runs)",
        *_ingestion(second),
        "   new-data sensors before the transformations: "
        + "; ".join(f"{name}: {what}" for name, what in second.sensor_requests.items()),
        f"   enriched_posts   processed {enriched2['processed_keys']} of {live_after}"
        f" keys = {len(expected.changed_posts)} changed posts + {expected.reverse_join_only} more posts of the "
        f"renamed profile (reverse join) ({ok(enriched2['processed_keys'], expected.enriched_keys)})",
        f"                    read {_reads(enriched2)} (filtered join: only the authors of those posts)",
        f"   user_post_stats  processed {stats2['processed_keys']} keys: authors of changed posts + renamed "
        f"author ({ok(stats2['processed_keys'], len(expected.stats_users))})",
        _moderated(second, len(expected.changed_posts), "the changed posts; no reference input", ok),
        f"   engine time: {_engine_times(second)}",
        "",
        "Offsets (per transformation and input: before -> after the second run, UTC; age = since it last moved)",
        *_offsets(story.offsets_before, story.offsets_after),
        f"Checks after the second run: {passed}/{len(second.checks)} passed "
        f"({', '.join(sorted({name for _, name, _, _ in second.checks}))})",
        "",
    ]
    if story.history_post is not None:
        lines.append(f"History of post {story.history_post} in the versioned table posts (as-of reads by delta):")
        previous = object()
        for delta, commit_ts, text in story.history:
            shown = "absent" if text is None else ("unchanged" if text == previous else repr(text))
            lines.append(f"   as of delta {delta} (committed {_clock(commit_ts)}): {shown}")
            previous = text
    if story.deleted_post is not None:
        present = [d for d, here in story.deleted_presence if here]
        absent = [d for d, here in story.deleted_presence if not here]
        lines.append(
            f"   post {story.deleted_post} (soft-deleted at the source, sys_op=1): present as of deltas "
            f"{_span(present)}, absent as of {_span(absent)}"
        )
    lines += [
        "",
        f"Done in {story.seconds:.0f} s, {runs} Dagster runs. `make dev` shows them (assets, metadata, checks,"
        " partitions) at http://127.0.0.1:3000",
    ]
    return "\n".join(lines)


def _span(deltas: list[int]) -> str:
    if not deltas:
        return "none"
    return str(deltas[0]) if len(deltas) == 1 else f"{deltas[0]}-{deltas[-1]}"
