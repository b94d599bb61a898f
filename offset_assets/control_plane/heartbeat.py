"""`HeartbeatThread`: a daemon thread that keeps a control-plane row alive by calling
`beat()` every `interval_s` until stopped (run leases, claimed job_log ranges)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType


class HeartbeatThread:
    """Calls `beat()` every `interval_s` from a daemon thread, from `start()` (or entering
    the `with` block) until `stop()` (or leaving it).

    `beat()` returns False when what it keeps alive was lost (taken over): the thread
    stops and `lost` turns true. An exception from `beat()` is kept in `error`; the
    thread then stops when `stop_on_error`, else tries again at the next beat. Either
    way the holder finds out for sure at commit time, which checks it still holds the row.
    """

    def __init__(self, beat: Callable[[], bool], interval_s: float, name: str, *,
                 stop_on_error: bool = False, join_timeout_s: float | None = None) -> None:
        self._beat = beat
        self._interval_s = interval_s
        self._stop_on_error = stop_on_error
        self._join_timeout_s = join_timeout_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.lost = False
        self.error: BaseException | None = None

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                if not self._beat():
                    self.lost = True
                    return
            except Exception as exc:  # noqa: BLE001 - kept for the holder; the commit decides
                self.error = exc
                if self._stop_on_error:
                    return

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self._join_timeout_s)

    def __enter__(self) -> HeartbeatThread:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
