"""Every benchmark command of docs/benchmark.md can start: its module imports against the
library as it is now (a moved or renamed name breaks `make bench` here, not weeks later
when someone runs it) and has the entry point its `python -m` usage calls."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

COMMANDS = sorted(p.stem for p in (Path(__file__).resolve().parent.parent / "bench").glob("*.py")
                  if "__main__" in p.read_text())


def test_the_benchmark_commands_are_found():
    assert {"capacity", "copy_workload", "dagster_runs", "run", "tiny_run", "versioned_reads"} <= set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_a_benchmark_command_imports_and_has_its_entry_point(name):
    module = importlib.import_module(f"bench.{name}")

    assert callable(module.main), f"bench.{name} has no main()"
