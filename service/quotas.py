"""Per-tenant quotas, checked before the work they bound is accepted.

The number of a tenant's unfinished jobs is checked by the queue's submit script itself
(atomically with the enqueue, :meth:`service.queue.JobQueue.submit`); stored bytes are
checked here, before an upload is parsed and stored. Both raise
:class:`~service.errors.QuotaExceeded` subclasses, a ``429`` with ``Retry-After``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.errors import StorageQuotaExceeded

if TYPE_CHECKING:
    from service.datasets import DatasetStore
    from service.queue import JobQueue
    from service.tenants import Quota


def stored_bytes(tenant: str, datasets: DatasetStore, queue: JobQueue) -> int:
    """What a tenant stores: its datasets' arrays and its results' files."""
    return datasets.stored_bytes(tenant) + queue.result_bytes(tenant)


def check_storage(
    tenant: str, quota: Quota, datasets: DatasetStore, queue: JobQueue, incoming: int
) -> None:
    """StorageQuotaExceeded when ``incoming`` more bytes would take the tenant past its
    quota (nothing to check without one)."""
    if not quota.max_stored_bytes:
        return
    used = stored_bytes(tenant, datasets, queue)
    if used + incoming > quota.max_stored_bytes:
        raise StorageQuotaExceeded(tenant, used, incoming, quota.max_stored_bytes)
