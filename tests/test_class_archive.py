"""The class archive (`offset_assets/class_archive.py`): every Spark driver of the
installation starts with it once it is built, a JVM that cannot use it starts without
it, and a caller's own choice of class sharing is kept; the Java that runs Spark archives
and maps classes on Spark's class path."""

from __future__ import annotations

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


def _java_of(spark) -> tuple[str, str]:
    """The Java that runs Spark here and the class path Spark's launcher gives its JVMs."""
    system = spark.sparkContext._jvm.java.lang.System
    return str(Path(system.getProperty("java.home")) / "bin" / "java"), system.getProperty("java.class.path")


def test_the_java_that_runs_spark_archives_and_maps_classes_on_sparks_class_path(spark, tmp_path):
    """What the archive rests on, with the real Java and class path: a JVM writes the
    classes it loaded at exit, and with `-Xshare:on` (which refuses to start rather than
    run without the archive) maps them for that class path. `make test` does not build
    the full archive (its JVMs would save about what its 40 s build costs); this is the
    same mechanism on the classes `java -version` loads."""
    java, class_path = _java_of(spark)
    path = tmp_path / "version.jsa"
    dumped = subprocess.run([java, f"-XX:ArchiveClassesAtExit={path}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off",
                             "-cp", class_path, "-version"], capture_output=True, text=True, timeout=120)
    assert dumped.returncode == 0, dumped.stderr
    assert path.is_file() and path.stat().st_size > 0
    mapped = subprocess.run([java, "-Xshare:on", f"-XX:SharedArchiveFile={path}", "-cp", class_path, "-version"],
                            capture_output=True, text=True, timeout=120)
    assert mapped.returncode == 0, mapped.stderr
    assert "sharing" in mapped.stderr


def test_the_test_sessions_jvm_was_started_with_the_archive_exactly_when_one_is_built(spark):
    """Where `make dev` (or `offset-assets class-archive`) built the archive before the
    tests, the session's JVM was started with it and mapped it (a JVM maps an archive only
    after checking it against its own Java build and class path); where none is built
    (`make test` does not wait for one), it was started without the option."""
    jvm = spark.sparkContext._jvm
    arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    path = configured_class_archive()
    if path is None or not path.is_file():
        assert [a for a in arguments if a.startswith("-XX:SharedArchiveFile")] == []
        return
    assert f"-XX:SharedArchiveFile={path}" in arguments
    assert str(path) in Path(f"/proc/{jvm.java.lang.ProcessHandle.current().pid()}/maps").read_text()
