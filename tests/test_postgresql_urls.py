"""PostgreSQL URLs as users write them: `postgresql://` (and `postgres://`) reach the same
database through every entry point that takes a URL (`connect`, `OffsetStore`,
`OFFSET_ASSETS_DB_URL`, the CLI's `--db-url`, `SqlTableSource` on the driver and on
Spark's executors), all through psycopg2, and the user's own SQLAlchemy code connects
with the same URL using what offset-assets installs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from offset_assets import OffsetStore
from offset_assets.cli import main as cli
from offset_assets.config import ENV_DB_URL
from offset_assets.control_plane import connect, database
from offset_assets.control_plane.database import sqlalchemy_url
from offset_assets.ranges.planners import DataRange, RangeKind
from offset_assets.ranges.sources import SqlTableSource


@pytest.fixture(params=["postgresql", "postgres"])
def users_url(request, postgres_url) -> Iterator[str]:
    """The fixture's database, its URL written without a driver as users write it."""
    url = postgres_url.replace("postgresql+psycopg2://", f"{request.param}://", 1)
    assert url != postgres_url
    yield url
    database.forget(url)


@pytest.mark.parametrize(("written", "driver"), [
    ("postgresql://u@h/db", "postgresql+psycopg2"),
    ("postgres://u@h/db", "postgresql+psycopg2"),
    ("postgresql+psycopg2://u@h/db", "postgresql+psycopg2"),
    ("postgresql+psycopg://u@h/db", "postgresql+psycopg"),
    ("sqlite:///state/control_plane.db", "sqlite"),
])
def test_a_postgresql_url_without_a_driver_connects_through_psycopg2_and_a_named_driver_is_kept(written, driver):
    assert sqlalchemy_url(written).drivername == driver


def test_connect_offset_store_the_environment_and_the_cli_take_a_postgresql_url_as_users_write_it(
        users_url, postgres_url, monkeypatch):
    plane = connect(users_url)
    assert (plane.dialect, plane.engine.driver) == ("postgresql", "psycopg2")
    OffsetStore(db_url=users_url).update_offsets_bulk({("enriched_orders", "orders"): 1_700_000_000.5})

    # The same database as the driver-qualified URL sees.
    assert OffsetStore(db_url=postgres_url).get_offset("enriched_orders", "orders") == 1_700_000_000.5
    monkeypatch.setenv(ENV_DB_URL, users_url)
    assert OffsetStore().get_offset("enriched_orders", "orders") == 1_700_000_000.5

    from_env = CliRunner().invoke(cli, ["offsets"])
    from_option = CliRunner().invoke(cli, ["--db-url", users_url, "offsets"], env={ENV_DB_URL: ""})
    for result in (from_env, from_option):
        assert result.exit_code == 0, result.output
        assert result.output.splitlines()[1].split()[:3] == ["enriched_orders", "orders", "1700000000.5"]


# SQLAlchemy itself knows no `postgres://`: the user's own code writes `postgresql://`.
@pytest.mark.parametrize("users_url", ["postgresql"], indirect=True)
def test_the_users_own_sqlalchemy_code_and_sql_table_source_read_one_postgresql_url_on_driver_and_executors(
        users_url, spark):
    # What the guide's source.py does with the URL: SQLAlchemy's own driver for it.
    engine = sa.create_engine(users_url)
    metadata = sa.MetaData()
    orders = sa.Table("orders", metadata,
                      sa.Column("order_id", sa.Integer, primary_key=True, autoincrement=True),
                      sa.Column("amount_cents", sa.Integer, nullable=False))
    metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(orders.insert(), [{"amount_cents": 100}, {"amount_cents": 250}, {"amount_cents": 75}])
    engine.dispose()

    source = SqlTableSource(users_url, "orders", id_column="order_id")
    assert source.max_id() == 3
    batch = source.read_range(spark, DataRange(RangeKind.AUTO_INC_ID, "1", None))
    # The rows were read by the executors' Python workers, each opening its own engine.
    assert (batch.end, sorted(tuple(r) for r in batch.df.collect())) == ("3", [(2, 250), (3, 75)])
