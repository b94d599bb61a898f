"""The operational database the reference pipeline ingests from, and its traffic.

`posts` (auto-increment id, user_id, text, updated_at, is_deleted) and `profiles`
(id, name, updated_at) in SQLite by default (`OFFSET_ASSETS_SOURCE_URL` for PostgreSQL).
Deletes are soft (`is_deleted = 1` with a new updated_at): an id- or time-range
ingestion can only see what a query returns, so a delete must be a row change.
The traffic generator is seeded, so a demo run is repeatable.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass

import sqlalchemy as sa

from offset_assets.config import state_dir

ENV_SOURCE_URL = "OFFSET_ASSETS_SOURCE_URL"

metadata = sa.MetaData()
posts = sa.Table(
    "posts",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("user_id", sa.Integer, nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False, index=True),
    sa.Column("is_deleted", sa.Integer, nullable=False, server_default="0"),
)
profiles = sa.Table(
    "profiles",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False, index=True),
)

WORDS = ("spark", "dagster", "offset", "delta", "lake", "batch", "stream", "key", "join", "range")
NAMES = ("ann", "bob", "cyd", "dee", "eve", "fay", "gus", "hal", "ivy", "jon", "kim", "lou")


def source_url() -> str:
    return os.environ.get(ENV_SOURCE_URL) or f"sqlite:///{state_dir() / 'source.db'}"


def source_engine(url: str | None = None) -> sa.Engine:
    engine = sa.create_engine(url or source_url())
    metadata.create_all(engine)
    return engine


@dataclass
class Traffic:
    """What one burst of traffic did to the source."""

    inserted_posts: list[int]
    updated_posts: list[int]
    deleted_posts: list[int]
    renamed_profiles: list[int]

    @property
    def changed_posts(self) -> set[int]:
        return {*self.inserted_posts, *self.updated_posts, *self.deleted_posts}

    def describe(self) -> str:
        return (
            f"{len(self.inserted_posts)} posts inserted, {len(self.updated_posts)} updated, "
            f"{len(self.deleted_posts)} deleted; {len(self.renamed_profiles)} profile(s) renamed"
        )


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8)))


def seed_source(engine: sa.Engine, users: int, posts_count: int, seed: int = 7,
                now: float | None = None) -> None:
    """Fill an empty source: `users` profiles and `posts_count` posts."""
    rng = random.Random(seed)
    ts = now if now is not None else time.time()
    with engine.begin() as conn:
        conn.execute(profiles.insert(), [
            {"id": uid, "name": f"{NAMES[uid % len(NAMES)]}-{uid}", "updated_at": ts}
            for uid in range(1, users + 1)
        ])
        conn.execute(posts.insert(), [
            {"user_id": rng.randint(1, users), "text": _text(rng), "updated_at": ts}
            for _ in range(posts_count)
        ])


def generate_traffic(engine: sa.Engine, inserts: int, updates: int, deletes: int,
                     renames: int, seed: int = 11, now: float | None = None) -> Traffic:
    """Insert, update and soft-delete posts and rename profiles, all at time `now`."""
    rng = random.Random(seed)
    ts = now if now is not None else time.time()
    with engine.begin() as conn:
        live = [row.id for row in conn.execute(
            sa.select(posts.c.id).where(posts.c.is_deleted == 0).order_by(posts.c.id))]
        users = [row.id for row in conn.execute(sa.select(profiles.c.id).order_by(profiles.c.id))]
        touched = rng.sample(live, min(len(live), updates + deletes))
        updated, deleted = sorted(touched[:updates]), sorted(touched[updates:])
        renamed = sorted(rng.sample(users, min(len(users), renames)))
        for post_id in updated:
            conn.execute(posts.update().where(posts.c.id == post_id)
                         .values(text=_text(rng), updated_at=ts))
        for post_id in deleted:
            conn.execute(posts.update().where(posts.c.id == post_id)
                         .values(is_deleted=1, updated_at=ts))
        for user_id in renamed:
            conn.execute(profiles.update().where(profiles.c.id == user_id)
                         .values(name=f"{rng.choice(NAMES)}-{user_id}-renamed", updated_at=ts))
        inserted = []
        for _ in range(inserts):
            result = conn.execute(posts.insert().values(
                user_id=rng.choice(users), text=_text(rng), updated_at=ts))
            inserted.append(result.inserted_primary_key[0])
    return Traffic(inserted, updated, deleted, renamed)
