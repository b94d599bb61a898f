"""The public API is on the page: every name a project imports is in a package's `__all__`,
documented by a docstring of its own, and `docs/reference.md` says what the code says."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location("api_reference", ROOT / "scripts" / "api_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_project_imports_ingestion_from_the_dagster_adapter_and_the_top_level():
    from offset_assets import IngestionJob as top_level
    from offset_assets.dagster_adapter import (
        AutoIncrementIdPlanner,
        IngestionJob,
        SqlTableSource,
        TimeWindowPlanner,
        ingestion_asset,
    )

    assert top_level is IngestionJob
    assert {AutoIncrementIdPlanner.__name__, SqlTableSource.__name__, TimeWindowPlanner.__name__,
            ingestion_asset.__name__} == {"AutoIncrementIdPlanner", "SqlTableSource",
                                          "TimeWindowPlanner", "ingestion_asset"}


def test_every_public_class_and_function_has_a_docstring_of_its_own():
    assert _generator().missing_docstrings() == []


def test_the_reference_page_is_what_the_code_says():
    page = (ROOT / "docs" / "reference.md").read_text()

    assert page == _generator().render(), "docs/reference.md is stale: run scripts/api_reference.py"
