"""The shop's operational database: `customers` and `orders` in a SQLite file.

Run `python -m first_pipeline.source` to create it with a few rows, and
`python -m first_pipeline.source change` for the change the guide's second run processes.
"""

from __future__ import annotations

import os
import sys
import time

import sqlalchemy as sa

# Where the shop's database lives (the pipeline reads it; any SQLAlchemy URL works).
SOURCE_URL = os.environ.get("SHOP_SOURCE_URL", "sqlite:///shop.db")

metadata = sa.MetaData()
customers = sa.Table(
    "customers",
    metadata,
    sa.Column("customer_id", sa.Integer, primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("country", sa.Text, nullable=False),
    # Epoch seconds of the row's last change: the daily windows of customers select on it.
    sa.Column("updated_at", sa.Double, nullable=False),
)
orders = sa.Table(
    "orders",
    metadata,
    # Auto-increment: the id ranges of orders select on it.
    sa.Column("order_id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("customer_id", sa.Integer, nullable=False),
    sa.Column("amount_cents", sa.Integer, nullable=False),
)


def create_source(url: str = SOURCE_URL, at: float | None = None) -> None:
    """Create the tables with four customers and six orders, stamped `at` (default: now)."""
    stamp = time.time() if at is None else at
    engine = sa.create_engine(url)
    metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(customers.insert(), [
            {"customer_id": 1, "name": "Ann", "country": "DE", "updated_at": stamp},
            {"customer_id": 2, "name": "Bob", "country": "FR", "updated_at": stamp},
            {"customer_id": 3, "name": "Cid", "country": "FR", "updated_at": stamp},
            {"customer_id": 4, "name": "Dee", "country": "IT", "updated_at": stamp},
        ])
        conn.execute(orders.insert(), [
            {"customer_id": 1, "amount_cents": 12_000},
            {"customer_id": 1, "amount_cents": 2_500},
            {"customer_id": 2, "amount_cents": 4_000},
            {"customer_id": 3, "amount_cents": 15_000},
            {"customer_id": 3, "amount_cents": 900},
            {"customer_id": 4, "amount_cents": 7_000},
        ])
    engine.dispose()


def change_source(url: str = SOURCE_URL, at: float | None = None) -> None:
    """The change of the guide's second run: Bob moves from FR to DE, Eve (ES) joins, and
    two orders arrive (Eve's first, and one more of Ann's)."""
    stamp = time.time() if at is None else at
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(customers.update().where(customers.c.customer_id == 2)
                     .values(country="DE", updated_at=stamp))
        conn.execute(customers.insert().values(customer_id=5, name="Eve", country="ES", updated_at=stamp))
        conn.execute(orders.insert(), [
            {"customer_id": 5, "amount_cents": 30_000},
            {"customer_id": 1, "amount_cents": 1_000},
        ])
    engine.dispose()


if __name__ == "__main__":
    if sys.argv[1:] == ["change"]:
        change_source()
    else:
        create_source()
