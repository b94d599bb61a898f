"""The CLI finds its control plane or says so.

Every command, run where there is no control plane or with a URL that is malformed or
unreachable, prints one line naming the URL (password masked) and the cause, exits 1 and
creates nothing: no SQLite file, no `state` folder. Control planes are created by
pipeline runs, never by the CLI (`offset_assets/cli/base.py`).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from offset_assets.cli import main
from offset_assets.control_plane import connect

REPOSITORY = Path(__file__).resolve().parents[1]

# Every command, with arguments that would pass click's own checks.
COMMANDS = {
    "offsets": ["offsets"],
    "metrics": ["metrics"],
    "rescan": ["rescan", "t", "--yes"],
    "reset": ["reset", "t", "--yes"],
    "reprocess": ["reprocess", "t", "--yes"],
    "init-offsets": ["init-offsets", "t", "--input", "posts"],
    "deltas": ["deltas", "orders"],
    "show": ["show", "orders"],
    "sql": ["sql", "SELECT * FROM orders"],
    "jobs": ["jobs"],
    "compact": ["compact", "orders"],
    "cleanup": ["cleanup"],
    "revert": ["revert", "orders", "--to", "1", "--yes"],
}

# A bad URL and the start of the one line the CLI prints for it ({tmp}: the working
# folder, {port}: a closed port on localhost).
BAD_URLS = {
    "port not a number": (
        "postgresql://u:s3cret@localhost:abc/db",
        "malformed control-plane URL 'postgresql://u:***@localhost:abc/db': the port is not a number",
    ),
    "unclosed IPv6 host": (
        "postgresql://u:s3cret@[::1/db",
        "malformed control-plane URL 'postgresql://u:***@[::1/db': the port is not a number",
    ),
    "not a URL": ("not a url", "malformed control-plane URL 'not a url': Could not parse"),
    "unknown dialect": (
        "nosuchdb://u:s3cret@localhost/db",
        "unsupported control-plane URL 'nosuchdb://u:***@localhost/db': Can't load plugin",
    ),
    "unescaped @ in the password": (
        "postgresql://u:s3cret@x@localhost/db",
        "malformed control-plane URL 'postgresql://u:***@localhost/db': an '@' in the password",
    ),
    "port out of range": (
        "postgresql://u:s3cret@localhost:99999/db",
        'cannot reach control-plane database postgresql://u:***@localhost:99999/db: invalid port number: "99999"',
    ),
    "unknown sslmode": (
        "postgresql://u:s3cret@127.0.0.1:{port}/db?sslmode=bogus",
        "cannot reach control-plane database postgresql://u:***@127.0.0.1:{port}/db?sslmode=bogus: "
        'invalid sslmode value: "bogus"',
    ),
    "closed port": (
        "postgresql://u:s3cret@127.0.0.1:{port}/db",
        "cannot reach control-plane database postgresql://u:***@127.0.0.1:{port}/db: connection to server",
    ),
    "password as a query parameter": (
        "postgresql://u@127.0.0.1:{port}/db?password=s3cret",
        "cannot reach control-plane database postgresql://u@127.0.0.1:{port}/db?password=***: connection",
    ),
    "SQLite file under a missing folder": (
        "sqlite:////proc/1/nonexistent/x.db",
        "no control plane at sqlite:////proc/1/nonexistent/x.db: the file does not exist; "
        "the CLI creates none, a pipeline's first run does",
    ),
    "missing SQLite file": (
        "sqlite:///{tmp}/elsewhere/control_plane.db",
        "no control plane at sqlite:///{tmp}/elsewhere/control_plane.db: the file does not exist; "
        "the CLI creates none",
    ),
    "relative missing SQLite file": (
        "sqlite:///state/control_plane.db",
        "no control plane at sqlite:///state/control_plane.db: the file {tmp}/state/control_plane.db "
        "does not exist",
    ),
    "SQLite file that is not a database": (
        "sqlite:///{tmp}/notes.txt",
        "cannot reach control-plane database sqlite:///{tmp}/notes.txt: file is not a database",
    ),
}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def empty_folder(tmp_path, monkeypatch) -> Path:
    """The working folder of a shell user outside any project: no state, no environment."""
    folder = tmp_path / "elsewhere-cwd"
    folder.mkdir()
    monkeypatch.chdir(folder)
    for name in ("OFFSET_ASSETS_DB_URL", "OFFSET_ASSETS_HOME", "OFFSET_ASSETS_WAREHOUSE"):
        monkeypatch.delenv(name, raising=False)
    return folder


# `ranges plan` works on a Dagster instance and may create the control plane, as a
# sensor's first tick would: its errors are specified in tests/test_cli_ranges.py.
# `class-archive` acts on no control plane: tests/test_class_archive.py.
ELSEWHERE = {"ranges", "class-archive"}


def test_every_command_is_checked_here():
    assert set(main.list_commands(click.Context(main))) == set(COMMANDS) | ELSEWHERE


def test_each_command_is_registered_by_the_module_the_root_group_imports_for_it():
    """The root group imports a command's module only when the command runs
    (`base.COMMAND_MODULES`): each module, imported alone in a new process, registers the
    commands the map sends to it."""
    from offset_assets.cli.base import COMMAND_MODULES

    script = ("import importlib, json, sys\n"
              "from offset_assets.cli.base import main\n"
              "importlib.import_module('offset_assets.cli.' + sys.argv[1])\n"
              "print(json.dumps(sorted(main.commands)))\n")
    for module in sorted(set(COMMAND_MODULES.values())):
        done = subprocess.run([sys.executable, "-c", script, module], capture_output=True, text=True, check=True,
                              cwd=REPOSITORY)
        mapped = {name for name, mapped_to in COMMAND_MODULES.items() if mapped_to == module}
        assert mapped <= set(json.loads(done.stdout)), module


@pytest.mark.parametrize("command", COMMANDS.values(), ids=COMMANDS.keys())
def test_without_a_control_plane_every_command_says_where_it_looked_and_creates_none(
    empty_folder, command
):
    result = CliRunner().invoke(main, command)

    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == (
        f"error: no control plane at sqlite:///{empty_folder}/state/control_plane.db: "
        "the file does not exist (the default path, as neither --db-url nor "
        "OFFSET_ASSETS_DB_URL names one); the CLI creates none, a pipeline's first run does\n"
    )
    assert list(empty_folder.iterdir()) == []


@pytest.mark.parametrize("case", BAD_URLS.keys())
@pytest.mark.parametrize("command", COMMANDS.values(), ids=COMMANDS.keys())
def test_a_bad_url_is_one_line_naming_the_masked_url_and_the_cause(empty_folder, command, case):
    template, expected = BAD_URLS[case]
    port = closed_port()
    url = template.format(tmp=empty_folder, port=port)
    (empty_folder / "notes.txt").write_text("a text file, not a SQLite database\n" * 100)
    before = sorted(empty_folder.iterdir())

    result = CliRunner().invoke(main, ["--db-url", url, *command])

    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith("error: " + expected.format(tmp=empty_folder, port=port))
    assert result.stderr.count("\n") == 1
    assert "s3cret" not in result.output
    assert sorted(empty_folder.iterdir()) == before


def test_a_url_from_the_environment_is_reported_the_same_way(empty_folder):
    result = CliRunner().invoke(
        main, ["offsets"], env={"OFFSET_ASSETS_DB_URL": "postgresql://u:s3cret@localhost:abc/db"}
    )

    assert result.exit_code == 1
    assert result.stderr.startswith(
        "error: malformed control-plane URL 'postgresql://u:***@localhost:abc/db': the port is not a number"
    )
    assert "s3cret" not in result.output
    assert list(empty_folder.iterdir()) == []


def test_an_existing_control_plane_at_the_default_path_is_found(empty_folder):
    connect(f"sqlite:///{empty_folder}/state/control_plane.db")  # as a pipeline's first run does

    result = CliRunner().invoke(main, ["offsets"])

    assert result.exit_code == 0
    assert result.output == "no offsets\n"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "error: no control plane at sqlite:///{tmp}/state/control_plane.db: the file does not exist "
             "(the default path"),
        ({"OFFSET_ASSETS_DB_URL": "postgresql://u:s3cret@localhost:abc/db"},
         "error: malformed control-plane URL 'postgresql://u:***@localhost:abc/db'"),
    ],
    ids=["no control plane", "malformed URL"],
)
def test_the_command_in_a_process_of_its_own_prints_one_line_and_creates_nothing(empty_folder, env, expected):
    inherited = {name: value for name, value in os.environ.items() if not name.startswith("OFFSET_ASSETS_")}

    done = subprocess.run(
        [sys.executable, "-m", "offset_assets.cli", "offsets"],
        capture_output=True,
        text=True,
        cwd=empty_folder,
        env={**inherited, "PYTHONPATH": str(REPOSITORY), **env},
        timeout=120,
    )

    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith(expected.format(tmp=empty_folder))
    assert done.stderr.count("\n") == 1
    assert "s3cret" not in done.stderr
    assert list(empty_folder.iterdir()) == []
