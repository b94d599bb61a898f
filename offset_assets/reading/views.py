"""Every versioned table as a global temp view, kept current: what a long-lived Spark
application (`make dev`'s Spark Connect server) serves to clients that only speak SQL.

A temp view belongs to one session; a Connect server gives each client a session of its
own. A global temp view (`global_temp.posts`) is seen by every session of the
application, so one registration serves every client, a `pyspark --remote` shell or a
BI tool included. A view is a plan over the files of one catalog state, so `GlobalViews`
registers them all again (at one new state) whenever a commit or a compaction changed
the catalog: a cheap control-plane query every `interval_s`, no Spark job.

A query over the views reads the state of the last registration, table by table: a
query that runs while they are registered again may join a table's new state with
another's old one. One committed state per query, and the system-time clauses, are
`VersionedTables.sql` (Python, over Connect too) and `offset-assets sql`.
"""

from __future__ import annotations

import sys
import threading

from offset_assets.reading.tables import VersionedTables

__all__ = ["GlobalViews"]


class GlobalViews:
    """The tables of `tables` as global temp views of their actual state."""

    def __init__(self, tables: VersionedTables) -> None:
        self.tables = tables
        self.registered: dict[str, int] = {}
        self._version: tuple | None = None
        self._warned = ""

    def catalog_version(self) -> tuple:
        """What the views show: each table's last committed delta and latest snapshot."""
        names = self.tables.names()
        deltas, _clock = self.tables.catalog.snapshot_state(names)
        snapshots = {name: self.tables.catalog.snapshot_at(name, sys.maxsize) for name in names}
        return tuple((name, deltas[name], snapshots[name].data_path if snapshots[name] else None) for name in names)

    def refresh(self) -> bool:
        """Register the views again when the catalog changed since they were; True if so."""
        version = self.catalog_version()
        if version == self._version:
            return False
        self.registered = self.tables.register_views(global_views=True)
        self._version = version
        return True

    def serve(self, stop: threading.Event, interval_s: float = 2.0) -> None:
        """`refresh` every `interval_s` seconds until `stop` is set; a failed refresh is
        reported on stderr (once until it changes) and tried again at the next interval."""
        while not stop.is_set():
            try:
                self.refresh()
                self._warned = ""
            except Exception as exc:  # noqa: BLE001 - the next interval tries again
                warning = f"{type(exc).__name__}: {(str(exc) or '-').splitlines()[0][:200]}"
                if warning != self._warned:
                    print(f"warning: the global views were not refreshed ({warning})", file=sys.stderr, flush=True)
                    self._warned = warning
            stop.wait(interval_s)
