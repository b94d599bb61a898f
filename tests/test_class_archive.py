"""The class archive (`offset_assets/class_archive.py`): every Spark driver of the
installation starts with it once it is built, a JVM that cannot use it starts without
it, and a caller's own choice of class sharing is kept. `make test` builds it first
(`offset-assets class-archive`), so with CI=true the test session's own JVM must have
mapped it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from offset_assets.class_archive import (
    DRIVER_JAVA_OPTIONS,
    ENV_CLASS_ARCHIVE,
    class_archive_options,
    configured_class_archive,
    default_class_archive,
    with_class_archive,
    with_driver_class_archive,
)
from offset_assets.cli import main
from offset_assets.dagster_adapter import spark_config_from_environment
from offset_assets.spark import RUN_COST_CONF

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture
def archive(tmp_path, monkeypatch) -> Path:
    """An archive file where OFFSET_ASSETS_CLASS_ARCHIVE points (its content is the JVM's
    concern: one it cannot map is skipped at start)."""
    path = tmp_path / "spark-classes.jsa"
    path.write_bytes(b"not mapped by these tests")
    monkeypatch.setenv(ENV_CLASS_ARCHIVE, str(path))
    return path


def test_a_driver_starts_with_the_archive_its_installation_built(archive):
    options = f"-XX:SharedArchiveFile={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"
    assert class_archive_options() == options
    assert with_class_archive("-XX:+UseSerialGC") == f"-XX:+UseSerialGC {options}"
    assert with_driver_class_archive({"spark.master": "local[2]"}) == {
        "spark.master": "local[2]", DRIVER_JAVA_OPTIONS: options}
    assert with_driver_class_archive({DRIVER_JAVA_OPTIONS: "-Xss4m"})[DRIVER_JAVA_OPTIONS] == f"-Xss4m {options}"


def test_the_dagster_resources_start_a_driver_with_the_archive_and_a_connect_client_without(archive, monkeypatch):
    monkeypatch.delenv("OFFSET_ASSETS_SPARK_MASTER", raising=False)
    monkeypatch.delenv("OFFSET_ASSETS_SPARK_REMOTE", raising=False)
    assert spark_config_from_environment({"spark.master": "local[2]"}) == {
        **RUN_COST_CONF, "spark.master": "local[2]", DRIVER_JAVA_OPTIONS: class_archive_options()}
    assert spark_config_from_environment({"spark.remote": "sc://connect:15002"}) == {
        "spark.remote": "sc://connect:15002"}


def test_a_callers_own_class_sharing_options_are_kept(archive):
    for own in ("-Xshare:off", "-XX:SharedArchiveFile=/opt/mine.jsa", "-XX:ArchiveClassesAtExit=/tmp/new.jsa"):
        assert with_class_archive(f"-XX:+UseSerialGC {own}") == f"-XX:+UseSerialGC {own}"


def test_no_archive_adds_no_option(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_CLASS_ARCHIVE, str(tmp_path / "never-built.jsa"))
    assert class_archive_options() == ""
    assert with_driver_class_archive({"spark.master": "local[2]"}) == {"spark.master": "local[2]"}
    assert with_class_archive(None) == ""
    spaced = tmp_path / "a folder" / "spark-classes.jsa"
    spaced.parent.mkdir()
    spaced.write_bytes(b"x")
    monkeypatch.setenv(ENV_CLASS_ARCHIVE, str(spaced))
    assert class_archive_options() == ""  # Spark's launchers would split the option
    for off in ("off", "OFF", ""):
        monkeypatch.setenv(ENV_CLASS_ARCHIVE, off)
        assert configured_class_archive() is None and class_archive_options() == ""
    monkeypatch.delenv(ENV_CLASS_ARCHIVE)
    assert configured_class_archive() == default_class_archive()


def test_the_command_builds_nothing_over_an_archive_there_and_names_the_switch_that_turned_it_off(archive, monkeypatch):
    done = CliRunner().invoke(main, ["class-archive", "--if-missing"])
    assert done.exit_code == 0, done.output
    assert done.output.strip() == f"class archive {archive}: there already"
    assert archive.read_bytes() == b"not mapped by these tests"
    monkeypatch.setenv(ENV_CLASS_ARCHIVE, "off")
    refused = CliRunner().invoke(main, ["class-archive"])
    assert refused.exit_code == 2
    assert f"{ENV_CLASS_ARCHIVE} turns the class archive off" in refused.output


def test_the_archive_make_built_is_mapped_by_the_test_sessions_jvm(spark, monkeypatch):
    """`make test` builds the archive first (`offset-assets class-archive`: a child driver
    runs the throwaway story and its JVM archives its classes at exit). The session's JVM
    was started with it and mapped it: a JVM maps an archive only after checking it
    against its own Java build and class path. And with `-Xshare:on` the same Java
    refuses to start unless it can map it for the class path Spark's launcher gives every
    Spark JVM here (the session's own)."""
    monkeypatch.delenv(ENV_CLASS_ARCHIVE, raising=False)
    path = default_class_archive()
    if not path.is_file():
        if IN_CI:
            pytest.fail(f"CI=true but {path} is missing: `make test` builds it first (offset-assets class-archive)")
        pytest.skip(f"no class archive at {path} (`offset-assets class-archive` builds it)")
    jvm = spark.sparkContext._jvm
    assert f"-XX:SharedArchiveFile={path}" in list(
        jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert str(path) in Path(f"/proc/{jvm.java.lang.ProcessHandle.current().pid()}/maps").read_text()
    system = jvm.java.lang.System
    checked = subprocess.run([str(Path(system.getProperty("java.home")) / "bin" / "java"), "-Xshare:on",
                              f"-XX:SharedArchiveFile={path}", "-cp", system.getProperty("java.class.path"),
                              "-version"], capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stderr
    assert "sharing" in checked.stderr
