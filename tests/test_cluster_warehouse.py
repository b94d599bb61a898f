"""Warehouse locations off a local driver: what is refused before any write, and the
Python-side file layer (fsspec) that replaces the JVM's Hadoop FileSystem calls."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field

import pytest

from offset_assets.versioned.layout import WarehouseFiles, WarehousePathError, check_warehouse_location


@dataclass
class SessionConf:
    values: dict[str, str]

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


@dataclass
class ClassicSession:
    """What `check_warehouse_location` asks of a classic session: its master."""

    master: str
    conf: SessionConf = field(init=False)

    def __post_init__(self) -> None:
        self.conf = SessionConf({"spark.master": self.master})


def test_a_relative_warehouse_is_refused_with_a_cluster_master_and_named():
    with pytest.raises(WarehousePathError, match=r"warehouse 'state/warehouse' is a relative path"):
        check_warehouse_location(ClassicSession("spark://10.0.0.1:7077"), "state/warehouse")


def test_absolute_paths_and_uris_are_accepted_everywhere_and_relative_ones_on_a_local_driver():
    cluster = ClassicSession("yarn")
    for warehouse in ("/data/warehouse", "file:///data/warehouse", "hdfs://nn:8020/warehouse",
                      "s3a://lake/warehouse"):
        assert check_warehouse_location(cluster, warehouse) == warehouse
    assert check_warehouse_location(ClassicSession("local[2]"), "state/warehouse") == "state/warehouse"


def test_warehouse_files_list_and_delete_folders_in_the_uri_form_they_were_given(tmp_path):
    root = f"file://{tmp_path}/orders/deltas"
    for name in ("000000000001-aaa", "000000000002-bbb"):
        (tmp_path / "orders" / "deltas" / name / "w0000").mkdir(parents=True)
        (tmp_path / "orders" / "deltas" / name / "w0000" / "part-0.parquet").write_bytes(b"x")
    files = WarehouseFiles()

    folders = sorted(files.list_folders(root), key=lambda f: f.name)
    assert [(f.name, f.path) for f in folders] == [
        ("000000000001-aaa", f"{root}/000000000001-aaa"), ("000000000002-bbb", f"{root}/000000000002-bbb")]
    assert all(f.modified_at > 0 for f in folders)
    assert files.delete(folders[0].path) is True
    assert not files.exists(folders[0].path) and files.exists(folders[1].path)
    assert files.delete(folders[0].path) is False
    assert files.list_folders(f"file://{tmp_path}/missing") == []


@pytest.mark.skipif(importlib.util.find_spec("s3fs") is not None, reason="s3fs is installed here")
def test_a_scheme_without_its_file_system_package_names_the_uri():
    with pytest.raises(WarehousePathError, match=r"cannot open the file system of 's3a://lake/w': .*s3fs"):
        WarehouseFiles().exists("s3a://lake/w")
