"""Layer 1: the control plane (SQLAlchemy + Alembic): offsets, delta catalog, job log, leases."""

from offset_assets.control_plane.database import (
    ControlPlane,
    ControlPlaneNotFoundError,
    ControlPlaneURLError,
    connect,
    mask_url,
)

__all__ = ["ControlPlane", "ControlPlaneNotFoundError", "ControlPlaneURLError", "connect", "mask_url"]
