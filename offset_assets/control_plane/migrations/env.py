"""Alembic environment: migrations run on the engine handed in by `upgrade_to_head`."""

from __future__ import annotations

from alembic import context
from sqlalchemy import text

config = context.config
engine = config.attributes["engine"]
version_table = config.get_main_option("version_table")

with engine.begin() as connection:
    if connection.dialect.name == "postgresql":
        # Two processes starting on a fresh database must not both create the schema.
        connection.execute(text("SELECT pg_advisory_xact_lock(727274)"))
    context.configure(
        connection=connection,
        version_table=version_table,
        render_as_batch=connection.dialect.name == "sqlite",
        transactional_ddl=True,
    )
    with context.begin_transaction():
        context.run_migrations()
