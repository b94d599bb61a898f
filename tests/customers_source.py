"""The `customers` source table that the ingestion tests read from (SQLite via SQLAlchemy)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from pyspark.sql import types as T

CUSTOMERS = T.StructType([
    T.StructField("id", T.LongType(), False),
    T.StructField("name", T.StringType()),
    T.StructField("city", T.StringType()),
])


@pytest.fixture
def source_url(tmp_path):
    url = f"sqlite:///{tmp_path / 'source.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(
            "CREATE TABLE customers (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT, city TEXT, "
            "created_at DATETIME)"))
    engine.dispose()
    return url
