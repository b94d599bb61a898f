"""The offset store on SQLite and PostgreSQL: reads, never-decreasing writes, validation,
resets, statistics, unreachable databases, and the Dagster resource around it."""

from __future__ import annotations

import math
import socket
import time
from decimal import Decimal

import dagster as dg
import pytest
import sqlalchemy as sa

from offset_assets import OffsetStore
from offset_assets.config import ENV_DB_URL
from offset_assets.control_plane import ControlPlane, connect, database
from offset_assets.control_plane.delta_catalog import DeltaCatalog
from offset_assets.control_plane.leases import RunLeases
from offset_assets.control_plane.names import NAME_MAX_LENGTH, InvalidNameError
from offset_assets.control_plane.offsets import OffsetRepository
from offset_assets.control_plane.reprocess import ReprocessRequests
from offset_assets.errors import ControlPlaneUnavailableError, InvalidOffsetError


@pytest.fixture
def offsets(db_url) -> OffsetRepository:
    return OffsetRepository(connect(db_url))


def set_updated_at(repo: OffsetRepository, transformation_id: str, input_name: str, at: float):
    with repo.plane.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE transform_input_offset SET updated_at = :at "
                "WHERE transformation_id = :t AND input_table_name = :i"
            ),
            {"at": at, "t": transformation_id, "i": input_name},
        )


def all_rows(repo: OffsetRepository) -> dict[tuple[str, str], float]:
    return {
        (s["transformation_id"], s["input_table_name"]): s["update_ts_offset"]
        for s in repo.get_statistics()
    }


# --- reads -----------------------------------------------------------------------------


def test_a_fresh_database_has_no_offsets(offsets):
    assert offsets.get_offsets_for_transformation("process_posts") == {}
    assert offsets.get_offset("process_posts", "posts") is None
    assert offsets.get_statistics() == []


def test_offsets_of_one_transformation_come_back_by_input_and_no_others(offsets):
    offsets.update_offsets_bulk(
        {
            ("process_posts", "posts"): 1702345678.123,
            ("process_posts", "profiles"): 1702345600.456,
            ("other", "posts"): 5.0,
        }
    )
    assert offsets.get_offsets_for_transformation("process_posts") == {
        "posts": 1702345678.123,
        "profiles": 1702345600.456,
    }
    assert offsets.get_offset("process_posts", "profiles") == 1702345600.456
    assert offsets.get_offset("other", "posts") == 5.0
    assert offsets.get_offset("other", "profiles") is None


def test_offsets_keep_full_double_precision(offsets):
    value = math.nextafter(1702345678.123456, math.inf)
    offsets.update_offsets_bulk({("t", "in"): value})
    assert offsets.get_offset("t", "in") == value


# --- never decreasing ------------------------------------------------------------------


def test_an_offset_never_decreases_and_the_larger_value_wins_per_key(offsets):
    offsets.update_offsets_bulk({("t", "a"): 200.0, ("t", "b"): 100.0})
    # Out-of-order commit (run 1 finishing after run 2): a lower, a higher.
    offsets.update_offsets_bulk({("t", "a"): 150.0, ("t", "b"): 300.0})
    assert offsets.get_offsets_for_transformation("t") == {"a": 200.0, "b": 300.0}
    offsets.update_offsets_bulk({("t", "a"): 200.0})
    assert offsets.get_offset("t", "a") == 200.0


def test_updated_at_moves_only_when_the_offset_advances(offsets):
    offsets.update_offsets_bulk({("t", "a"): 100.0})
    before = time.time()
    assert offsets.get_statistics()[0]["updated_at"] == pytest.approx(before, abs=5)

    set_updated_at(offsets, "t", "a", 1000.0)
    offsets.update_offsets_bulk({("t", "a"): 100.0})  # equal: no progress
    offsets.update_offsets_bulk({("t", "a"): 50.0})  # lower: kept, no progress
    assert offsets.get_statistics()[0]["updated_at"] == 1000.0

    offsets.update_offsets_bulk({("t", "a"): 101.0})
    [stat] = offsets.get_statistics()
    assert stat["update_ts_offset"] == 101.0
    assert stat["updated_at"] >= before


def test_an_empty_bulk_update_writes_nothing(offsets):
    offsets.update_offsets_bulk({})
    assert offsets.get_statistics() == []


# --- validation and atomicity ----------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (float("nan"), "is not finite"),
        (float("inf"), "is not finite"),
        (float("-inf"), "is not finite"),
        (10**400, "is not finite"),
        (None, "is not a number"),
        (True, "is not a number"),
        ("1702345678.1", "is not a number"),
        (Decimal("NaN"), "is not finite"),
        (-1.0, "is negative (an offset is a commit timestamp in epoch seconds)"),
        (-1702345678, "is negative"),
    ],
    ids=["nan", "inf", "-inf", "huge-int", "none", "bool", "string", "decimal-nan", "negative",
         "negative-int"],
)
def test_an_invalid_value_refuses_the_whole_bulk_naming_pair_and_value(offsets, bad, reason):
    offsets.update_offsets_bulk({("t", "posts"): 10.0})
    bulk = {
        ("t", "aaa"): 20.0,
        ("t", "posts"): 30.0,
        ("t", "profiles"): bad,
        ("t", "zzz"): 40.0,
    }
    with pytest.raises(InvalidOffsetError) as refused:
        offsets.update_offsets_bulk(bulk)
    message = str(refused.value)
    assert "'t'" in message and "'profiles'" in message and reason in message
    assert repr(bad)[:20] in message
    assert all_rows(offsets) == {("t", "posts"): 10.0}


def test_ints_and_decimals_are_stored_as_floats(offsets):
    offsets.update_offsets_bulk({("t", "int"): 7, ("t", "dec"): Decimal("1.5")})
    assert offsets.get_offsets_for_transformation("t") == {"int": 7.0, "dec": 1.5}


@pytest.mark.parametrize("key", [("t",), ("t", ""), ("t", 3), "t/posts"])
def test_a_malformed_key_refuses_the_bulk(offsets, key):
    with pytest.raises(InvalidOffsetError, match="not a \\(transformation_id, input_table_name\\)"):
        offsets.update_offsets_bulk({("t", "ok"): 1.0, key: 2.0})
    assert offsets.get_statistics() == []


def stored_row_count(repo: OffsetRepository) -> int:
    with repo.plane.begin() as conn:
        return conn.execute(sa.text("SELECT COUNT(*) FROM transform_input_offset")).scalar_one()


LONG_ID = "c" * 500
RULE = "name must be letters, digits, '_', '.', '-' (it becomes a folder name)"


@pytest.mark.parametrize(
    ("key", "refused"),
    [
        ((LONG_ID, "posts"), f"transformation id '{LONG_ID}' refused: name is 500 characters long, the limit is 128"),
        (("t", LONG_ID), f"input table name '{LONG_ID}' refused: name is 500 characters long, the limit is 128"),
        (("copy\nposts", "posts"), f"transformation id 'copy\\nposts' refused: {RULE}"),
        (("t", "posts\n"), f"input table name 'posts\\n' refused: {RULE}"),
        (("t", "a b"), f"input table name 'a b' refused: {RULE}"),
    ],
    ids=["500-character-id", "500-character-input", "newline-in-id", "trailing-newline-input", "space"],
)
def test_a_name_outside_the_rule_refuses_the_whole_bulk_on_every_backend(offsets, key, refused):
    # The same error on SQLite (which would store any length) and PostgreSQL (whose
    # String(255) would fail with a raw DataError past 255).
    offsets.update_offsets_bulk({("t", "ok"): 1.0})
    with pytest.raises(InvalidNameError) as raised:
        offsets.update_offsets_bulk({("t", "aaa"): 2.0, key: 3.0})
    assert str(raised.value) == refused
    assert stored_row_count(offsets) == 1
    assert all_rows(offsets) == {("t", "ok"): 1.0}


@pytest.mark.parametrize(
    "call",
    [
        lambda r, name: r.get_offsets_for_transformation(name),
        lambda r, name: r.get_offset(name, "posts"),
        lambda r, name: r.get_offset("t", name),
        lambda r, name: r.reset_offset(name),
        lambda r, name: r.reset_offset("t", name),
        lambda r, name: r.get_statistics(transformation_id=name),
    ],
    ids=["get_offsets_for_transformation", "get_offset-id", "get_offset-input", "reset_offset-id",
         "reset_offset-input", "get_statistics"],
)
@pytest.mark.parametrize("name", [LONG_ID, "t\n", ""], ids=["500-characters", "newline", "empty"])
def test_every_offset_entry_point_refuses_a_name_outside_the_rule(offsets, call, name):
    offsets.update_offsets_bulk({("t", "posts"): 1.0})
    with pytest.raises(InvalidNameError, match=r"refused: name (must be letters|is 500 characters long)"):
        call(offsets, name)
    assert all_rows(offsets) == {("t", "posts"): 1.0}


def test_a_negative_offset_refuses_the_bulk_and_writes_nothing_on_every_backend(offsets):
    with pytest.raises(InvalidOffsetError, match=r"offset of transformation 't', input 'posts' is negative "
                       r"\(an offset is a commit timestamp in epoch seconds\): -5\.0; nothing was written"):
        offsets.update_offsets_bulk({("t", "aaa"): 1.0, ("t", "posts"): -5.0})
    assert stored_row_count(offsets) == 0


def test_a_zero_offset_is_stored(offsets):
    offsets.update_offsets_bulk({("t", "posts"): 0})
    assert offsets.get_offset("t", "posts") == 0.0


def test_names_at_the_limit_are_stored_and_read_back_on_every_backend(offsets):
    tid, name = "t" * NAME_MAX_LENGTH, "i" * NAME_MAX_LENGTH
    offsets.update_offsets_bulk({(tid, name): 7.0})
    assert offsets.get_offsets_for_transformation(tid) == {name: 7.0}
    assert offsets.reset_offset(tid, name) == 1


def test_the_offset_store_resource_refuses_a_500_character_id_like_the_repository(db_url):
    store = OffsetStore(db_url=db_url)
    with pytest.raises(InvalidNameError, match="transformation id 'ccc.*' refused: name is 500 characters long"):
        store.update_offsets_bulk({(LONG_ID, "posts"): 1.0})
    assert store.get_statistics() == []


def test_bulk_update_inside_a_caller_transaction_rolls_back_with_it(offsets):
    with pytest.raises(RuntimeError, match="delta commit failed"):
        with offsets.plane.begin() as conn:
            offsets.update_offsets_bulk({("t", "a"): 10.0}, conn=conn)
            assert offsets.get_offset("t", "a", conn=conn) == 10.0
            raise RuntimeError("delta commit failed")
    assert offsets.get_offset("t", "a") is None

    with offsets.plane.begin() as conn:
        offsets.update_offsets_bulk({("t", "a"): 10.0}, conn=conn)
    assert offsets.get_offset("t", "a") == 10.0


# --- reset ------------------------------------------------------------------------------


def test_reset_of_one_input_deletes_only_that_offset(offsets):
    offsets.update_offsets_bulk({("t", "a"): 1.0, ("t", "b"): 2.0, ("u", "a"): 3.0})
    assert offsets.reset_offset("t", "a") == 1
    assert all_rows(offsets) == {("t", "b"): 2.0, ("u", "a"): 3.0}


def test_reset_of_a_transformation_deletes_all_its_inputs_only(offsets):
    offsets.update_offsets_bulk({("t", "a"): 1.0, ("t", "b"): 2.0, ("u", "a"): 3.0})
    assert offsets.reset_offset("t") == 2
    assert all_rows(offsets) == {("u", "a"): 3.0}


def test_reset_of_nothing_returns_zero(offsets):
    offsets.update_offsets_bulk({("t", "a"): 1.0})
    assert offsets.reset_offset("t", "missing") == 0
    assert offsets.reset_offset("missing") == 0
    assert all_rows(offsets) == {("t", "a"): 1.0}


def test_reset_is_the_only_way_an_offset_goes_down(offsets):
    offsets.update_offsets_bulk({("t", "a"): 500.0})
    offsets.update_offsets_bulk({("t", "a"): 10.0})
    assert offsets.get_offset("t", "a") == 500.0
    offsets.reset_offset("t", "a")
    offsets.update_offsets_bulk({("t", "a"): 10.0})
    assert offsets.get_offset("t", "a") == 10.0


def test_reset_inside_a_caller_transaction_rolls_back_with_it(offsets):
    offsets.update_offsets_bulk({("t", "a"): 1.0})
    with pytest.raises(RuntimeError):
        with offsets.plane.begin() as conn:
            assert offsets.reset_offset("t", conn=conn) == 1
            raise RuntimeError("backfill aborted")
    assert offsets.get_offset("t", "a") == 1.0


# --- statistics -------------------------------------------------------------------------


def test_statistics_measure_age_from_the_last_advance(offsets):
    offsets.update_offsets_bulk({("t", "b"): 20.0, ("t", "a"): 10.0, ("s", "x"): 5.0})
    set_updated_at(offsets, "t", "a", 1_000.0)
    set_updated_at(offsets, "t", "b", 4_600.0)
    set_updated_at(offsets, "s", "x", 87_400.0)
    assert offsets.get_statistics(now=88_000.0) == [
        {
            "transformation_id": "s",
            "input_table_name": "x",
            "update_ts_offset": 5.0,
            "updated_at": 87_400.0,
            "offset_age_seconds": 600.0,
        },
        {
            "transformation_id": "t",
            "input_table_name": "a",
            "update_ts_offset": 10.0,
            "updated_at": 1_000.0,
            "offset_age_seconds": 87_000.0,
        },
        {
            "transformation_id": "t",
            "input_table_name": "b",
            "update_ts_offset": 20.0,
            "updated_at": 4_600.0,
            "offset_age_seconds": 83_400.0,
        },
    ]
    assert [s["input_table_name"] for s in offsets.get_statistics(transformation_id="t")] == [
        "a",
        "b",
    ]


def test_statistics_age_is_measured_against_the_current_time_by_default(offsets):
    offsets.update_offsets_bulk({("t", "a"): 10.0})
    set_updated_at(offsets, "t", "a", time.time() - 3600)
    [stat] = offsets.get_statistics()
    assert stat["offset_age_seconds"] == pytest.approx(3600, abs=30)


# --- unreachable or malformed database --------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_unreachable_database_raises_a_clear_error_with_the_password_masked():
    url = f"postgresql://reader:s3cret@127.0.0.1:{_closed_port()}/offsets"
    with pytest.raises(ControlPlaneUnavailableError) as failed:
        OffsetStore(db_url=url).get_offset("t", "a")
    message = str(failed.value)
    assert message.startswith("cannot reach control-plane database postgresql://reader:***@127.0.0.1:")
    assert "s3cret" not in message


@pytest.mark.parametrize(
    "call",
    [
        lambda r: r.get_offsets_for_transformation("t"),
        lambda r: r.get_offset("t", "a"),
        lambda r: r.update_offsets_bulk({("t", "a"): 1.0}),
        lambda r: r.reset_offset("t"),
        lambda r: r.get_statistics(),
    ],
    ids=["get_offsets_for_transformation", "get_offset", "update_offsets_bulk", "reset_offset",
         "get_statistics"],
)
def test_every_method_surfaces_an_unreachable_database(call):
    # Built directly, so each method is the first to touch the (closed) port.
    url = f"postgresql+psycopg2://writer:s3cret@127.0.0.1:{_closed_port()}/offsets"
    plane = ControlPlane(url, sa.create_engine(url))
    with pytest.raises(ControlPlaneUnavailableError, match=r"writer:\*\*\*@") as failed:
        call(OffsetRepository(plane))
    assert "s3cret" not in str(failed.value)
    plane.dispose()


def test_a_malformed_url_raises_a_clear_error():
    expected = "malformed control-plane URL 'not a url'"
    with pytest.raises(ControlPlaneUnavailableError, match=expected):
        OffsetStore(db_url="not a url").get_offsets_for_transformation("t")


# --- the Dagster resource ---------------------------------------------------------------


def test_offset_store_works_as_a_plain_object(db_url):
    store = OffsetStore(db_url=db_url)
    store.update_offsets_bulk({("t", "a"): 3.0, ("t", "b"): 4.0})
    store.update_offsets_bulk({("t", "a"): 1.0})
    assert store.get_offsets_for_transformation("t") == {"a": 3.0, "b": 4.0}
    assert store.get_offset("t", "b") == 4.0
    stats = store.get_statistics(transformation_id="t")
    assert [s["update_ts_offset"] for s in stats] == [3.0, 4.0]
    assert store.reset_offset("t", "a") == 1
    assert store.reset_offset("t") == 1
    assert store.get_statistics() == []
    assert store.control_plane().url == db_url


def test_offset_store_defaults_to_the_url_in_the_environment(sqlite_url, monkeypatch):
    monkeypatch.setenv(ENV_DB_URL, sqlite_url)
    OffsetStore().update_offsets_bulk({("t", "a"): 9.0})
    assert OffsetRepository(connect(sqlite_url)).get_offset("t", "a") == 9.0


def test_offset_store_defaults_to_sqlite_in_the_state_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_DB_URL, raising=False)
    monkeypatch.setenv("OFFSET_ASSETS_HOME", str(tmp_path / "state"))
    store = OffsetStore()
    assert store.control_plane().url == f"sqlite:///{tmp_path / 'state' / 'control_plane.db'}"
    store.update_offsets_bulk({("t", "a"): 1.0})
    assert (tmp_path / "state" / "control_plane.db").exists()
    database.forget(store.control_plane().url)


def test_offset_store_is_a_dagster_resource_usable_from_an_asset(db_url):
    @dg.asset
    def process_posts(offset_store: OffsetStore) -> float:
        before = offset_store.get_offset("process_posts", "posts")
        offset_store.update_offsets_bulk({("process_posts", "posts"): 42.0})
        return -1.0 if before is None else before

    store = OffsetStore(db_url=db_url)
    first = dg.materialize([process_posts], resources={"offset_store": store})
    assert first.success and first.output_for_node("process_posts") == -1.0
    second = dg.materialize([process_posts], resources={"offset_store": store})
    assert second.output_for_node("process_posts") == 42.0


def test_offset_store_db_url_can_be_configured_at_launch(sqlite_url):
    @dg.asset
    def reads_offset(offset_store: OffsetStore) -> float | None:
        return offset_store.get_offset("t", "a")

    OffsetRepository(connect(sqlite_url)).update_offsets_bulk({("t", "a"): 5.0})
    result = dg.materialize(
        [reads_offset],
        resources={"offset_store": OffsetStore.configure_at_launch()},
        run_config={"resources": {"offset_store": {"config": {"db_url": sqlite_url}}}},
    )
    assert result.output_for_node("reads_offset") == 5.0


@pytest.mark.parametrize(
    "call",
    [
        lambda plane, name: RunLeases(plane).acquire(name, "holder"),
        lambda plane, name: DeltaCatalog(plane).register_table(name, ["id"], "{}"),
        lambda plane, name: ReprocessRequests(plane).request(name),
    ],
    ids=["run-lease", "table-registration", "reprocess-request"],
)
@pytest.mark.parametrize("name", [LONG_ID, "t\n"], ids=["500-characters", "newline"])
def test_the_other_control_plane_entry_points_refuse_a_name_outside_the_rule(db_url, call, name):
    plane = connect(db_url)
    with pytest.raises(InvalidNameError, match=r"refused: name (must be letters|is 500 characters long)"):
        call(plane, name)
    with plane.engine.connect() as conn:
        assert conn.execute(sa.text("select count(*) from run_lease")).scalar() == 0
        assert conn.execute(sa.text("select count(*) from versioned_table")).scalar() == 0
        assert conn.execute(sa.text("select count(*) from transform_reprocess_request")).scalar() == 0
