"""Concurrent writers: several real processes, each with its own connection, bulk-update
the same offsets with interleaved rising and falling values. The stored offset ends at
the maximum of everything written and, as seen by any writer, never goes down."""

from __future__ import annotations

import multiprocessing
import random

from offset_assets.control_plane import connect
from offset_assets.control_plane.offsets import OffsetRepository

WRITERS = 4
ROUNDS = 40
KEYS = [("process_posts", "posts"), ("process_posts", "profiles"), ("enrich", "posts")]


def writer_values(writer: int) -> list[float]:
    """This writer's values in shuffled order: its sequence goes up and down, and the
    writers' value sets interleave (writer w owns w, w + WRITERS, w + 2 * WRITERS, ...)."""
    values = [float(writer + round_ * WRITERS) for round_ in range(ROUNDS)]
    random.Random(writer).shuffle(values)
    return values


def write_offsets(url: str, writer: int, start, results) -> None:  # noqa: ANN001
    try:
        results.put((writer, race(url, writer, start)))
    except BaseException as exc:  # reported to the parent instead of leaving it waiting
        results.put((writer, [f"writer {writer} failed: {exc!r}"]))
        raise


def race(url: str, writer: int, start) -> list[str]:  # noqa: ANN001
    offsets = OffsetRepository(connect(url))
    rng = random.Random(1000 + writer)
    seen = {key: float("-inf") for key in KEYS}
    violations: list[str] = []
    start.wait()
    for value in writer_values(writer):
        keys = KEYS[:]
        rng.shuffle(keys)  # different key orders in different writers: no deadlock allowed
        offsets.update_offsets_bulk({key: value for key in keys})
        for key in KEYS:
            stored = offsets.get_offset(*key)
            if stored < value or stored < seen[key]:
                violations.append(f"{key}: read {stored} after writing {value}, seen {seen[key]}")
            seen[key] = stored
    return violations


def test_concurrent_writers_end_with_the_largest_value_and_never_lower_it(db_url):
    connect(db_url)  # migrate once, before the race
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(WRITERS)
    results = context.Queue()
    writers = [
        context.Process(target=write_offsets, args=(db_url, w, start, results))
        for w in range(WRITERS)
    ]
    for process in writers:
        process.start()
    reports = dict(results.get(timeout=300) for _ in writers)
    for process in writers:
        process.join(timeout=60)

    assert [process.exitcode for process in writers] == [0] * WRITERS
    assert reports == {w: [] for w in range(WRITERS)}
    largest = max(max(writer_values(w)) for w in range(WRITERS))
    assert largest == float(WRITERS * ROUNDS - 1)
    offsets = OffsetRepository(connect(db_url))
    assert {key: offsets.get_offset(*key) for key in KEYS} == {key: largest for key in KEYS}
