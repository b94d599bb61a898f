"""Schema upgrades keep the data: a control plane created at the first revision (offsets
as first released, without `updated_at`) is brought to head without losing an
offset, on SQLite and PostgreSQL."""

from __future__ import annotations

import time

import sqlalchemy as sa
from alembic.script import ScriptDirectory

from offset_assets.control_plane import ControlPlane, connect
from offset_assets.control_plane.database import VERSION_TABLE, alembic_config, upgrade_to_head
from offset_assets.control_plane.offsets import OffsetRepository

SEED_OFFSETS = {
    ("process_posts", "posts"): 1702345678.123456,
    ("process_posts", "profiles"): 1702345600.456,
    ("enrich", "posts"): 5.0,
}


def database_at_first_revision(url: str) -> ControlPlane:
    """A database migrated to 0001 only, holding SEED_OFFSETS written with plain SQL."""
    plane = ControlPlane(url, sa.create_engine(url))  # not the cached, auto-migrated one
    upgrade_to_head(plane, "0001")
    with plane.engine.begin() as conn:
        columns = {c["name"] for c in sa.inspect(conn).get_columns("transform_input_offset")}
        assert columns == {"transformation_id", "input_table_name", "update_ts_offset"}
        conn.execute(
            sa.text(
                "INSERT INTO transform_input_offset "
                "(transformation_id, input_table_name, update_ts_offset) VALUES (:t, :i, :o)"
            ),
            [{"t": t, "i": i, "o": o} for (t, i), o in SEED_OFFSETS.items()],
        )
    return plane


def revision_of(plane: ControlPlane) -> str:
    with plane.engine.connect() as conn:
        return conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar_one()


def head_revision(plane: ControlPlane) -> str:
    return ScriptDirectory.from_config(alembic_config(plane)).get_current_head()


def test_upgrading_from_the_first_revision_keeps_offsets_and_dates_them_now(db_url):
    old = database_at_first_revision(db_url)
    assert revision_of(old) == "0001"
    before = time.time()

    upgrade_to_head(old)

    assert revision_of(old) == head_revision(old)
    stats = OffsetRepository(old).get_statistics()
    kept = {(s["transformation_id"], s["input_table_name"]): s["update_ts_offset"] for s in stats}
    assert kept == SEED_OFFSETS
    # Their true age is unknown: they count as updated at the upgrade.
    assert all(before - 1 <= s["updated_at"] <= time.time() + 1 for s in stats)
    old.dispose()


def test_first_use_upgrades_an_old_database_and_its_offsets_keep_never_decreasing(db_url):
    database_at_first_revision(db_url).dispose()

    offsets = OffsetRepository(connect(db_url))

    assert revision_of(offsets.plane) == head_revision(offsets.plane)
    assert offsets.get_offsets_for_transformation("process_posts") == {
        "posts": 1702345678.123456,
        "profiles": 1702345600.456,
    }
    offsets.update_offsets_bulk(
        {("process_posts", "posts"): 1.0, ("process_posts", "profiles"): 1702345700.0}
    )
    assert offsets.get_offsets_for_transformation("process_posts") == {
        "posts": 1702345678.123456,
        "profiles": 1702345700.0,
    }


def test_upgrading_to_0008_finds_the_delta_each_earlier_range_committed_so_a_revert_finds_the_range(db_url):
    """Ranges that succeeded before revision 0008 named their table and delta only in their
    last attempt's `write` step: the upgrade records both on the range."""
    plane = ControlPlane(db_url, sa.create_engine(db_url))
    upgrade_to_head(plane, "0007")
    ranges = [  # job_id, status, attempt, the write steps' outputs by attempt
        (1, "SUCCESS", 2, {1: '{"table": "orders", "delta_num": null}', 2: '{"table": "orders", "delta_num": 4}'}),
        (2, "SUCCESS", 1, {1: '{"table": "orders", "delta_num": null, "rows_unchanged": 3}'}),
        (3, "FAILURE", 1, {1: '{"table": "orders", "delta_num": 5}'}),
    ]
    with plane.engine.begin() as conn:
        for job_id, status, attempt, outputs in ranges:
            conn.execute(sa.text(
                "INSERT INTO job_log (job_id, workflow_name, job_name, data_range_start, status, create_time, "
                "last_update_time, attempt) VALUES (:j, 'w', 'orders_ingest', :s, :st, 0, 0, :a)"),
                {"j": job_id, "s": str(job_id), "st": status, "a": attempt})
            for number, output in outputs.items():
                conn.execute(sa.text(
                    "INSERT INTO step_log (job_id, attempt, step_id, status, start_time, duration, output) "
                    "VALUES (:j, :a, 'write', 'SUCCESS', 0, 0, :o)"), {"j": job_id, "a": number, "o": output})

    upgrade_to_head(plane)

    with plane.engine.connect() as conn:
        found = conn.execute(sa.text(
            "SELECT job_id, target_table, target_delta_num, reverted_by_delta FROM job_log ORDER BY job_id")).all()
    assert [tuple(row) for row in found] == [(1, "orders", 4, None), (2, None, None, None), (3, None, None, None)]
    plane.dispose()
