"""Where a frame read more than once is cached while it is used.

A frame that may hold more rows than memory (a batch larger than the catalog's limit:
a first run or a reprocess of a large table) is cached on disk only. With memory first
(MEMORY_AND_DISK), a block evicted to disk is read back into memory in one buffer the
size of the whole block, and its cached blocks stay locked while a task reads them, so
the same task's sorts and joins find no memory: at N = 10M with a 1g driver, a write's
classification failed with `OutOfMemoryError` in `BlockManager.maybeCacheDiskBytesInMemory`.
A small frame is cached in memory first.
"""

from __future__ import annotations

from pyspark import StorageLevel


def storage_level(large: bool) -> StorageLevel:
    """Disk only for a frame that may not fit in memory, memory first otherwise."""
    return StorageLevel.DISK_ONLY if large else StorageLevel.MEMORY_AND_DISK
