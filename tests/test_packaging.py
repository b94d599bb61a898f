"""What a plain `pip install offset-assets` brings (pyproject.toml's base requirements), for
what the docs show without an extra. `make wheel-check` installs the built wheel and runs
the guide with it; these say, without an install, why each requirement is there."""

from __future__ import annotations

import tomllib
from importlib.metadata import requires
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


def base_requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {Requirement(line).name: Requirement(line) for line in project["dependencies"]}


def test_the_base_install_has_pandas_in_the_range_pyspark_supports():
    # PySpark's `to_arrow_schema` (SQL and Kafka ranges, small local frames) refuses to run
    # without pandas; PySpark 4 asks for its `sql` extra's range and warns from 3.0 on.
    pandas = base_requirements()["pandas"]
    [declared] = [Requirement(line) for line in requires("pyspark")
                  if line.startswith("pandas") and 'extra == "sql"' in line]
    assert [str(s) for s in declared.specifier] == [">=2.2.0"]
    assert not pandas.specifier.contains("2.1.4") and not pandas.specifier.contains("3.0.0")
    assert pandas.specifier.contains("2.2.0") and pandas.specifier.contains("2.3.3")


def test_the_base_install_has_the_driver_sqlalchemy_picks_for_a_plain_postgresql_url_and_psycopg2():
    # SQLAlchemy 2.1 reads `postgresql://` as psycopg 3 in the user's own code; offset-assets
    # itself connects through psycopg2 (control_plane/database.py `sqlalchemy_url`).
    requirements = base_requirements()
    assert requirements["psycopg"].extras == {"binary"}
    assert "psycopg2-binary" in requirements


def test_the_extras_the_docs_name_are_declared_and_kafka_is_not_in_the_base_install():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert {"kafka", "connect"} <= set(project["optional-dependencies"])
    assert "confluent-kafka" not in base_requirements()
