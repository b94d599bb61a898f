"""`make demo` at a small size, run once per test session (per xdist worker): the
reference project's story test and the webserver test both read it.

The story runs in this process on the session's Spark, into a temporary Dagster
instance configured by the repository's `dagster.yaml` (its storage folders moved to the
temporary DAGSTER_HOME) and a temporary state folder (`OFFSET_ASSETS_HOME`). Its readers
only read; `DemoState.use` points the environment at it for one test. The tests that
take `demo_story` (`conftest.py`) share one xdist worker, so it runs once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest
import yaml

from assets_defs.demo.story import NON_EMBEDDED, DemoSizes, DemoStory, run_story
from offset_assets.config import ENV_HOME, default_db_url
from offset_assets.control_plane import database

ROOT = Path(__file__).resolve().parent.parent
SMALL = DemoSizes(users=6, posts=30, inserts=3, updates=2, deletes=1, renames=1)


def instance_home(folder: Path) -> Path:
    """A DAGSTER_HOME holding the repository's dagster.yaml, its storage moved inside."""
    home = folder / "dagster_home"
    home.mkdir()
    config = yaml.safe_load((ROOT / "dagster.yaml").read_text())
    storage = str(home / "storage_root")
    config["storage"]["sqlite"]["base_dir"] = storage
    config["local_artifact_storage"]["config"]["base_dir"] = storage
    config["compute_logs"]["config"]["base_dir"] = f"{storage}/storage"
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    return home


@dataclass(frozen=True)
class DemoState:
    home: Path  # DAGSTER_HOME
    state: Path  # OFFSET_ASSETS_HOME: control plane, warehouse, source database
    story: DemoStory

    def use(self, env: pytest.MonkeyPatch) -> None:
        """Point the embedded defaults and Dagster at this state for one test."""
        self.point_at(self.home, self.state, env)

    def instance(self) -> dg.DagsterInstance:
        return dg.DagsterInstance.from_config(str(self.home))

    @staticmethod
    def point_at(home: Path, state: Path, env: pytest.MonkeyPatch) -> None:
        for name in NON_EMBEDDED:
            env.delenv(name, raising=False)
        env.setenv("DAGSTER_HOME", str(home))
        env.setenv(ENV_HOME, str(state))


def run_demo(folder: Path, env: pytest.MonkeyPatch) -> DemoState:
    """The story into `folder`, with the environment pointed at it through `env`."""
    home, state = instance_home(folder), folder / "state"
    DemoState.point_at(home, state, env)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        story = run_story(SMALL, instance, progress=lambda _: None)
    database.forget(default_db_url())
    return DemoState(home, state, story)
