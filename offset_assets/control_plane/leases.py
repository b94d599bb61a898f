"""Run leases: at most one run of a transformation at a time.

A lease is a row per transformation with an expiry. The holder renews it while it works
(`LeaseKeeper` does so from a `HeartbeatThread`); a holder that died stops renewing and its
lease expires, so the next run takes over instead of waiting forever. A holder on this
host whose process no longer exists is treated as expired at once.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from offset_assets.control_plane.database import ControlPlane
from offset_assets.control_plane.heartbeat import HeartbeatThread
from offset_assets.control_plane.names import validate_name
from offset_assets.control_plane.schema import run_lease
from offset_assets.errors import LeaseHeldError

DEFAULT_TTL_S = 300.0


def make_holder(run_id: str) -> str:
    """`host:pid:run_id`: enough to tell who holds a lease and whether it is still alive."""
    return f"{socket.gethostname()}:{os.getpid()}:{run_id}"


def holder_is_dead(holder: str) -> bool:
    """Whether `holder` (`make_holder`'s `host:pid:...`) names a process of this host that
    no longer exists; a holder on another host, or not of that form, is not known dead."""
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@dataclass(frozen=True)
class Lease:
    transformation_id: str
    holder: str
    expires_at: float


class RunLeases:
    """Acquire, renew and release run leases in the control plane."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def acquire(self, transformation_id: str, holder: str, ttl_s: float = DEFAULT_TTL_S) -> Lease:
        validate_name(transformation_id, "transformation id")
        now = time.time()
        lease = Lease(transformation_id, holder, now + ttl_s)
        try:
            with self.plane.begin() as conn:
                conn.execute(
                    run_lease.insert().values(
                        transformation_id=transformation_id,
                        holder=holder,
                        acquired_at=now,
                        expires_at=lease.expires_at,
                    )
                )
            return lease
        except IntegrityError:
            pass
        with self.plane.begin() as conn:
            current = conn.execute(
                sa.select(run_lease.c.holder, run_lease.c.expires_at).where(
                    run_lease.c.transformation_id == transformation_id
                )
            ).one_or_none()
            if current is not None and current.expires_at >= now and not holder_is_dead(current.holder):
                raise LeaseHeldError(
                    f"transformation {transformation_id!r} is already running: lease held by "
                    f"{current.holder} until {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(current.expires_at))} UTC"
                )
            # Compare-and-set on the holder seen: two contenders cannot both take over.
            condition = run_lease.c.transformation_id == transformation_id
            if current is not None:
                condition = condition & (run_lease.c.holder == current.holder)
            taken = conn.execute(
                run_lease.update()
                .where(condition)
                .values(holder=holder, acquired_at=now, expires_at=lease.expires_at)
            ).rowcount
        if not taken:
            return self.acquire(transformation_id, holder, ttl_s)
        return lease

    def renew(self, lease: Lease, ttl_s: float = DEFAULT_TTL_S) -> Lease:
        expires_at = time.time() + ttl_s
        with self.plane.begin() as conn:
            updated = conn.execute(
                run_lease.update()
                .where(
                    (run_lease.c.transformation_id == lease.transformation_id)
                    & (run_lease.c.holder == lease.holder)
                )
                .values(expires_at=expires_at)
            ).rowcount
        if not updated:
            raise LeaseHeldError(
                f"lease of transformation {lease.transformation_id!r} was lost by {lease.holder}"
            )
        return Lease(lease.transformation_id, lease.holder, expires_at)

    def release(self, lease: Lease) -> None:
        with self.plane.begin() as conn:
            conn.execute(
                run_lease.delete().where(
                    (run_lease.c.transformation_id == lease.transformation_id)
                    & (run_lease.c.holder == lease.holder)
                )
            )

    def current(self, transformation_id: str) -> Lease | None:
        with self.plane.begin() as conn:
            row = conn.execute(
                sa.select(run_lease).where(run_lease.c.transformation_id == transformation_id)
            ).one_or_none()
        return None if row is None else Lease(row.transformation_id, row.holder, row.expires_at)


class LeaseKeeper:
    """Holds a lease for the duration of a `with` block, renewing it in the background
    (a `HeartbeatThread` renewing every third of the TTL; a failed renewal stops it: the
    run notices a lost lease at commit time)."""

    def __init__(self, leases: RunLeases, transformation_id: str, holder: str,
                 ttl_s: float = DEFAULT_TTL_S) -> None:
        self.leases = leases
        self.transformation_id = transformation_id
        self.holder = holder
        self.ttl_s = ttl_s
        self._heartbeat: HeartbeatThread | None = None
        self.lease: Lease | None = None

    def __enter__(self) -> LeaseKeeper:
        self.lease = self.leases.acquire(self.transformation_id, self.holder, self.ttl_s)
        self._heartbeat = HeartbeatThread(self._renew, self.ttl_s / 3, f"lease-{self.transformation_id}",
                                          stop_on_error=True, join_timeout_s=5)
        self._heartbeat.start()
        return self

    def _renew(self) -> bool:
        self.lease = self.leases.renew(self.lease, self.ttl_s)
        return True

    def __exit__(self, *exc_info: object) -> None:
        if self._heartbeat is not None:
            self._heartbeat.stop()
        if self.lease is not None:
            self.leases.release(self.lease)


def assert_lease_held(conn: sa.Connection, transformation_id: str, holder: str) -> None:
    """Inside a commit transaction: refuse to commit when the lease was taken over meanwhile."""
    current = conn.execute(
        sa.select(run_lease.c.holder).where(run_lease.c.transformation_id == transformation_id)
    ).scalar_one_or_none()
    if current != holder:
        raise LeaseHeldError(
            f"run {holder} of transformation {transformation_id!r} lost its lease "
            f"(now held by {current or 'nobody'}); nothing was committed"
        )
