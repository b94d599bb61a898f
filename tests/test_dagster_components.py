"""Ingestion jobs and incremental transformations declared as Dagster components
(`examples/components/shop/`: the guide's shop in `defs.yaml` files) load with
`load_defs_folder` into what the Python form builds and run on real Spark; `dg list
defs` lists their assets and checks, and `dg check defs` names a mistake in one line with
its file and key: a misspelt key, a column type Spark does not know, an import path that
does not import. The Kafka pipeline is one too (`examples/components/kafka_events/`,
tests/test_dagster_kafka_components.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
from dagster.components.resolved.errors import ResolutionException

from examples.first_pipeline import definitions as python_form
from examples.first_pipeline.source import change_source, create_source
from offset_assets.config import ENV_DB_URL, ENV_HOME, ENV_WAREHOUSE, default_db_url
from offset_assets.control_plane import database
from offset_assets.dagster_adapter import (
    IncrementalAssetComponent,
    IngestionJobComponent,
    OnFailedKeys,
    ingest_due_ranges,
    load_defs_folder,
)
from offset_assets.dagster_adapter.asset_spec import SPEC_KEY

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "components" / "shop"
DG = Path(sys.executable).parent / "dg"
TRANSFORMATIONS = ["enriched_orders", "revenue_by_country", "order_sizes"]
OUTPUTS = ["enriched_orders", "revenue_by_country", "large_orders", "small_orders"]
# A defs.yaml the guide shows: the marker line naming the file, then the fenced block.
YAML_BLOCK = re.compile(r"^<!-- file: (\S+) -->\n```yaml\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@pytest.fixture
def shop(tmp_path, monkeypatch):
    """The shop's database and today's first window; control plane and warehouse under
    ./state (the defaults of the example's resources)."""
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=None)
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    monkeypatch.setenv("SHOP_SOURCE_URL", url)
    monkeypatch.setenv("SHOP_LIVE_SINCE", today.isoformat())
    monkeypatch.setenv(ENV_HOME, str(tmp_path / "state"))
    monkeypatch.delenv(ENV_DB_URL, raising=False)
    monkeypatch.delenv(ENV_WAREHOUSE, raising=False)
    monkeypatch.syspath_prepend(str(EXAMPLE))
    yield url, today
    database.forget(default_db_url())


def load_example() -> dg.Definitions:
    return load_defs_folder(EXAMPLE / "shop_components")


def dg_command(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(DG), *args], cwd=project, capture_output=True, text=True, timeout=900)


@pytest.fixture
def project_copy(tmp_path, monkeypatch):
    """A copy of the shop's project to break, importable as `shop_components` (the
    example's own modules forgotten before and after)."""
    project = tmp_path / "shop"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__"))
    forget_modules("shop_components")
    monkeypatch.syspath_prepend(str(project))
    yield project
    forget_modules("shop_components")


def forget_modules(package: str) -> None:
    for name in [name for name in sys.modules if name == package or name.startswith(f"{package}.")]:
        del sys.modules[name]


def edit(project: Path, component: str, old: str, new: str) -> Path:
    """`old` replaced by `new` in the component's defs.yaml; its path."""
    path = project / "shop_components" / "defs" / component / "defs.yaml"
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new))
    return path


def test_the_guide_shows_the_components_as_they_are():
    shown = dict(YAML_BLOCK.findall((ROOT / "docs" / "guide.md").read_text()))
    assert sorted(shown) == [f"examples/components/{path}/defs.yaml" for path in (
        "kafka_events/kafka_components/defs/order_events", "shop/shop_components/defs/enriched_orders",
        "shop/shop_components/defs/order_sizes", "shop/shop_components/defs/orders")]
    for path, text in shown.items():
        assert text == (ROOT / path).read_text(), f"docs/guide.md shows {path} differently from the file"


def test_a_component_builds_the_asset_the_python_form_builds(shop):
    defs = load_example()
    for name in OUTPUTS:
        component = defs.get_assets_def(name)
        python = next(a for a in python_form.TRANSFORMATIONS if dg.AssetKey(name) in a.keys)
        key = dg.AssetKey(name)
        assert component.metadata_by_key[key][SPEC_KEY] == python.metadata_by_key[key][SPEC_KEY]
        component_spec, python_spec = component.specs_by_key[key], python.specs_by_key[key]
        assert component_spec.automation_condition == python_spec.automation_condition
        assert component_spec.description == python_spec.description
        assert component_spec.metadata["dagster/column_schema"] == python_spec.metadata["dagster/column_schema"]
    orders = defs.get_assets_def("orders")
    assert orders.partitions_def == dg.DynamicPartitionsDefinition(name="orders_ranges")
    assert isinstance(defs.get_assets_def("customers").partitions_def, dg.TimeWindowPartitionsDefinition)


def test_the_components_example_runs_on_spark_and_recomputes_only_what_changed(spark, shop):
    url, today = shop
    defs = load_example()
    transformations = list({defs.get_assets_def(name) for name in OUTPUTS})
    with dg.instance_for_test() as instance:
        create_source(url, at=today.replace(tzinfo=UTC).timestamp())
        assert ingest_due_ranges(defs, "orders", instance) == ["id:0-6"]
        ingest_today(defs, instance, today)
        first = dg.materialize(transformations, instance=instance, resources=defs.resources)
        assert revenue(defs) == {"DE": (2, 14_500), "FR": (3, 19_900), "IT": (1, 7_000)}

        change_source(url, at=today.replace(tzinfo=UTC).timestamp() + 60)
        assert ingest_due_ranges(defs, "orders", instance) == ["id:6-8"]
        ingest_today(defs, instance, today)
        second = dg.materialize(transformations, instance=instance, resources=defs.resources)

    assert revenue(defs) == {"DE": (4, 19_500), "ES": (1, 30_000), "FR": (2, 15_900), "IT": (1, 7_000)}
    assert processed(first) == {"enriched_orders": 6, "revenue_by_country": 3, "large_orders": 6, "small_orders": 6}
    # orders 3, 7, 8; DE, ES, FR; the new orders 7 and 8 (order 3's amount stayed as it was)
    assert processed(second) == {"enriched_orders": 3, "revenue_by_country": 3, "large_orders": 2,
                                 "small_orders": 2}


def ingest_today(defs: dg.Definitions, instance: dg.DagsterInstance, today: datetime) -> None:
    """Today's window of customers, still open: what the source holds so far."""
    customers = defs.get_assets_def("customers")
    assert dg.materialize([customers], partition_key=today.strftime("%Y-%m-%d"), instance=instance,
                          resources=defs.resources).success


def revenue(defs: dg.Definitions) -> dict[str, tuple[int, int]]:
    table = defs.resources["incremental_engine"].table(dg.AssetKey("revenue_by_country"))
    return {r["country"]: (r["orders"], r["revenue_cents"]) for r in table.read_actual().collect()}


def processed(result: dg.ExecuteInProcessResult) -> dict[str, int]:
    events = [e.step_materialization_data.materialization for e in result.get_asset_materialization_events()]
    return {event.asset_key.to_user_string(): event.metadata["processed_keys"].value for event in events}


def test_dg_lists_the_components_assets_checks_sensor_and_schedule_and_finds_them_valid():
    listed = dg_command(EXAMPLE, "list", "defs", "--json")
    assert listed.returncode == 0, listed.stderr[-3000:]
    found = json.loads(listed.stdout)
    assert {a["asset_key"]: a["source"] for a in found["assets"]} == {
        **{name: f"shop_components/defs/{name}/defs.yaml:2"
           for name in ("customers", "enriched_orders", "orders", "revenue_by_country")},
        **{name: "shop_components/defs/order_sizes/defs.yaml:2" for name in ("large_orders", "small_orders")}}
    assert sorted(c["key"] for c in found["asset_checks"]) == [
        f"{asset}:{check}" for asset in sorted(OUTPUTS) for check in ("offset_age", "offset_backlog")]
    assert {s["name"] for s in found["sensors"]} == {"orders_ranges_sensor", "default_automation_condition_sensor"}
    assert [s["name"] for s in found["schedules"]] == ["customers_schedule"]

    checked = dg_command(EXAMPLE, "check", "defs")
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert "All definitions loaded successfully." in checked.stdout + checked.stderr


def refused_line(output: str) -> str:
    """The line of `dg check defs`'s output that says what was refused."""
    [line] = [line for line in output.splitlines() if "ComponentDeclarationError: " in line]
    return line.split("ComponentDeclarationError: ", 1)[1]


def test_dg_check_defs_names_a_misspelt_key_in_one_line(project_copy):
    orders = edit(project_copy, "orders", "id_column: order_id", "id_colum: order_id")

    checked = dg_command(project_copy, "check", "defs")

    assert checked.returncode == 1
    assert refused_line(checked.stdout + checked.stderr) == (
        f"{orders}:5 - attributes.source: source.sql_table: unknown key 'id_colum' (keys: url, table, id_column, "
        "time_column, columns, db_schema, order_by, rows_per_slice, slices, fetch_size)")


def test_dg_check_defs_names_a_column_type_spark_does_not_know_in_one_line_with_its_file_line_and_key(project_copy):
    orders = edit(project_copy, "orders", "amount_cents: long\n", "amount_cents: lnog\n")

    checked = dg_command(project_copy, "check", "defs")

    assert checked.returncode == 1
    assert refused_line(checked.stdout + checked.stderr) == (
        f"{orders}:17 - attributes.target.columns.amount_cents: 'lnog' is not a Spark type (`<type> [not null]`: "
        "long, string, double, boolean, date, timestamp, decimal(10,2), ...)")
    assert "Stack Trace" not in (checked.stdout + checked.stderr).split("ComponentDeclarationError")[0]


@pytest.mark.parametrize(("component", "mistake", "said"), [
    ("enriched_orders", (".transform.enriched_orders", ".transform.enriched_ordrs"),
     "{file}:4 - attributes.function: cannot import '.transform.enriched_ordrs': module "
     "'shop_components.defs.enriched_orders.transform' has no attribute 'enriched_ordrs'"),
    ("order_sizes", ("columns: {order_id: long not null, customer_id: long, amount_cents: long}\n      description: "
                     "Orders under", "columns: {order_id: long not null, customer_id: lnog, amount_cents: long}\n"
                     "      description: Orders under"),
     "{file}:13 - attributes.outs.small_orders.columns.customer_id: 'lnog' is not a Spark type (`<type> "
     "[not null]`: long, string, double, boolean, date, timestamp, decimal(10,2), ...)"),
    ("order_sizes", ("    small_orders:\n      primary_key", "    small_orders:\n      primary_kye"),
     "{file}:6 - attributes.outs: outs.small_orders: unknown key 'primary_kye' (keys: columns, struct_type, "
     "primary_key, key, description, metadata); outs.small_orders: missing key 'primary_key'"),
    ("revenue_by_country", ("transform_keys: [country]", "transform_keys: [country, orders]"),
     "{file}:3 - attributes: incremental asset 'revenue_by_country': primary_key ['country'] is narrower than "
     "transform_keys ['country', 'orders']: the rows of transform keys that differ only in 'orders' would share a "
     "primary key (two states of one row in one write); a run replaces each processed key's output rows, so an "
     "output's primary key must tell which transform key a row belongs to: declare primary_key ['country', "
     "'orders'] (or one with a column that tells it)"),
    ("orders", ("  target:", "  on_malformed: skip\n  target:"),
     "{file}:12 - attributes.on_malformed: Input should be 'fail' or 'quarantine'"),
], ids=["function-path", "multi-asset-column-type", "multi-asset-misspelt-key", "narrow-primary-key",
        "on-malformed"])
def test_a_components_mistake_is_one_line_naming_its_file_and_key_when_the_project_loads(
        project_copy, component, mistake, said):
    path = edit(project_copy, component, *mistake)
    with pytest.raises(dg.DagsterInvalidDefinitionError) as refused:
        load_defs_folder(project_copy / "shop_components")
    assert str(refused.value) == said.format(file=path)


ORDERS_YAML = """
name: orders
source: {sql_table: {url: "sqlite:///shop.db", table: orders, id_column: order_id}}
planner: {auto_increment_id: {}}
target: {primary_key: [order_id], columns: {order_id: long not null, amount_cents: long}}
"""


@pytest.mark.parametrize(("mistake", "said"), [
    (("auto_increment_id", "auto_incremnt_id"),
     "planner: unknown key 'auto_incremnt_id' (keys: time_window, auto_increment_id, kafka_offsets, upstream)"),
    (("source: {sql_table", "source: {folder: {root: /landing}, sql_table"),
     "source: give exactly one of ['sql_table', 'folder', 'kafka'], got ['sql_table', 'folder']"),
    (("table: orders,", "tabel: orders,"),
     "source.sql_table: unknown key 'tabel' (keys: url, table, id_column, time_column, columns, db_schema, "
     "order_by, rows_per_slice, slices, fetch_size); source.sql_table: missing key 'table'"),
])
def test_a_mistake_in_a_nested_attribute_is_one_line_naming_the_key(mistake, said):
    with pytest.raises(ResolutionException) as raised:
        IngestionJobComponent.resolve_from_yaml(ORDERS_YAML.replace(*mistake))
    assert f"ValueError: {said}" in str(raised.value).splitlines()


def test_a_column_type_spark_cannot_parse_or_a_bad_period_is_refused_when_the_component_builds():
    context = dg.ComponentTree.for_test().load_context
    typo = IngestionJobComponent.resolve_from_yaml(ORDERS_YAML.replace("amount_cents: long", "amount_cents: lnog"))
    with pytest.raises(dg.DagsterInvalidDefinitionError, match=r" - attributes.target.columns.amount_cents: 'lnog' "
                                                               r"is not a Spark type"):
        typo.build_defs(context)
    windows = IngestionJobComponent.resolve_from_yaml(ORDERS_YAML.replace(
        "{auto_increment_id: {}}", "{time_window: {start: '2026-01-01', period: one day}}"))
    with pytest.raises(dg.DagsterInvalidDefinitionError, match=r" - attributes.planner.time_window: 'one day': "
                                                               r"Input should be a valid timedelta"):
        windows.build_defs(context)


def test_checks_null_builds_an_incremental_asset_without_offset_checks():
    component = IncrementalAssetComponent.resolve_from_yaml("""
function: examples.components.shop.shop_components.defs.revenue_by_country.transform.revenue_by_country
transform_keys: [country]
primary_key: [country]
columns: {country: string not null, orders: long not null, revenue_cents: long not null}
checks: null
""")
    defs = component.build_defs(dg.ComponentTree.for_test().load_context)
    assert [a.key for a in defs.assets] == [dg.AssetKey("revenue_by_country")] and not defs.asset_checks


def test_on_failed_keys_in_yaml_is_the_string_the_python_form_takes():
    component = IncrementalAssetComponent.resolve_from_yaml("""
function: examples.components.shop.shop_components.defs.revenue_by_country.transform.revenue_by_country
transform_keys: [country]
primary_key: [country]
columns: {country: string not null, orders: long not null, revenue_cents: long not null}
on_failed_keys: warn
""")
    [asset] = component.build_defs(dg.ComponentTree.for_test().load_context).assets
    stored = asset.metadata_by_key[dg.AssetKey("revenue_by_country")][SPEC_KEY]
    assert (component.on_failed_keys, stored["on_failed_keys"]) == (OnFailedKeys.WARN, "warn")
