"""Kafka ranges: from the committed offsets per topic-partition (Spark-style JSON) to whatever
the run consumes, decided when it runs."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from offset_assets.ranges.errors import PlanningError
from offset_assets.ranges.planners.contract import HistoryOf, LatestOffsetsSource
from offset_assets.ranges.planners.data_range import (
    DataRange,
    LoggedRange,
    PlanInputs,
    RangeKind,
    check_positive,
    committed_pointer,
    pending_ranges,
)

EARLIEST = "{}"  # no partition listed: every partition starts at its earliest offset


def kafka_offsets_json(offsets: Mapping[str, Mapping[str | int, int]]) -> str:
    """Canonical JSON of offsets per topic-partition (sorted, compact): equal offsets,
    equal strings, which the unique (job_name, data_range_start) claim relies on."""
    canonical = {
        topic: {str(p): int(o) for p, o in sorted(parts.items(), key=lambda kv: int(kv[0]))}
        for topic, parts in sorted(offsets.items())
    }
    return json.dumps(canonical, separators=(",", ":"))


def parse_kafka_offsets(text: str) -> dict[str, dict[str, int]]:
    try:
        data = json.loads(text)
        return {topic: {str(p): int(o) for p, o in parts.items()} for topic, parts in data.items()}
    except (ValueError, AttributeError, TypeError):
        raise PlanningError(
            f"Kafka offsets {text!r} are not JSON {{topic: {{partition: offset}}}}"
        ) from None


def kafka_has_new_messages(
    start: Mapping[str, Mapping[str, int]], latest: Mapping[str, Mapping[str, int]],
    earliest: Mapping[str, Mapping[str, int]] | None = None,
) -> bool:
    """Whether any partition's high watermark is beyond the range start (a partition
    missing from the start begins at its earliest offset, 0 when unknown)."""
    for topic, parts in latest.items():
        for partition, high in parts.items():
            default = (earliest or {}).get(topic, {}).get(str(partition), 0)
            if int(high) > start.get(topic, {}).get(str(partition), default):
                return True
    return False


@dataclass(frozen=True)
class KafkaOffsetPlanner:
    """One range from the committed offsets (else earliest) to whatever the run consumes.

    The end is decided when the range runs (each partition's last stable offset, past
    transaction markers, capped per partition), so the next range can only
    be planned once this one is done. `max_offsets_per_partition` (None: up to the high
    watermark) caps what the run reads of each partition, carried as the range's
    `max_size`: a backlog of a topic becomes several ranges, one after the other.
    """

    default_start: str = EARLIEST
    max_offsets_per_partition: int | None = None
    kind: RangeKind = field(default=RangeKind.KAFKA_OFFSET, init=False)

    def __post_init__(self) -> None:
        check_positive(self, "max_offsets_per_partition", self.max_offsets_per_partition)

    @property
    def period_minutes(self) -> None:
        return None

    @property
    def keyed_range_max_size(self) -> int | None:
        return self.max_offsets_per_partition

    def gather(self, source: object, history_of: HistoryOf, now: datetime | None) -> PlanInputs:
        latest = source.latest_offsets() if isinstance(source, LatestOffsetsSource) else None
        return PlanInputs(latest_offsets=latest)

    def pointer(self, history: Iterable[LoggedRange]) -> str:
        default = kafka_offsets_json(parse_kafka_offsets(self.default_start))
        return committed_pointer(history, default)

    def plan(self, history: Sequence[LoggedRange], inputs: PlanInputs) -> list[DataRange]:
        start = self.pointer(history)
        if inputs.latest_offsets is not None and not kafka_has_new_messages(
            parse_kafka_offsets(start), inputs.latest_offsets
        ):
            return []
        return pending_ranges([DataRange(self.kind, start, None, max_size=self.max_offsets_per_partition)],
                        history)
