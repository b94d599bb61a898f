"""A throwaway PostgreSQL server started with the machine's initdb/pg_ctl: the test suite's
(`tests/conftest.py`) and the capacity benchmark's (`bench/capacity.py`).

initdb refuses to run as root, so under root the server runs as an unprivileged system
user created here. The data folder lives in a temporary directory and is removed at the end.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

PG_USER = "offset_assets_pg"


def find_pg_bin() -> Path | None:
    """Folder holding initdb and pg_ctl: PATH first, then /usr/lib/postgresql/*/bin (newest)."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return Path(on_path).parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
    )
    for folder in reversed(candidates):
        if (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ensure_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(PG_USER)
    except KeyError:
        # Two xdist workers may both get here: the loser's useradd fails, the user exists.
        added = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PG_USER],
            capture_output=True,
        )
        try:
            return pwd.getpwnam(PG_USER)
        except KeyError:
            added.check_returncode()
            raise


@dataclass
class PostgresServer:
    bin_dir: Path
    root: Path
    port: int
    as_user: str | None

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/postgres"

    def url_for(self, database: str) -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        cmd = [str(self.bin_dir / args[0]), *args[1:]]
        if self.as_user:
            cmd = ["runuser", "-u", self.as_user, "--", *cmd]
        return subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=self.root)

    @classmethod
    def start(cls) -> PostgresServer:
        bin_dir = find_pg_bin()
        if bin_dir is None:
            raise FileNotFoundError("initdb/pg_ctl not found on PATH or under /usr/lib/postgresql/*/bin")
        root = Path(tempfile.mkdtemp(prefix="offset_assets_pg_"))
        as_user = None
        if os.geteuid() == 0:
            user = _ensure_user()
            os.chown(root, user.pw_uid, user.pw_gid)
            as_user = PG_USER
        server = cls(bin_dir=bin_dir, root=root, port=_free_port(), as_user=as_user)
        data = root / "data"
        server._run("initdb", "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
        # Each xdist worker starts its own server (its own folder and socket directory). A
        # free port can be taken by another worker before the server binds it: try another.
        for attempt in range(3):
            try:
                server._run(
                    "pg_ctl", "-D", str(data), "-l", str(root / "server.log"), "-w", "-t", "60",
                    "-o", f"-p {server.port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
                          "-c max_connections=200",
                    "start",
                )
                return server
            except subprocess.CalledProcessError:
                if attempt == 2:
                    raise
                server.port = _free_port()
        raise AssertionError("unreachable")

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
