"""Domain errors: what the stores and parsers raise when a request cannot be honoured.

They know nothing of HTTP: :mod:`service.problems` is the one place that gives each its
status code, problem type and headers, so the storage layer can be used (by the workers,
by tests, by a CLI) without a web framework, and the API's error contract is in one table.
"""

from __future__ import annotations

from collections.abc import Sequence


class ServiceError(Exception):
    """A failure a caller caused or can retry.

    ``detail`` says what happened and what to change; ``field`` names where (``body``,
    ``body.data[3][1]``, ``header.content-type``) and ``message`` says it in a few words.
    """

    def __init__(self, detail: str, *, field: str | None = None, message: str | None = None):
        super().__init__(detail)
        self.detail = detail
        self.field = field
        self.message = message if message is not None else detail

    def __str__(self) -> str:
        return self.detail


class InvalidDataset(ServiceError):
    """A body that is not a usable dataset (wrong shape, not numeric, not finite, ...)."""

    def __init__(self, detail: str, field: str = "body") -> None:
        super().__init__(detail, field=field)


class UnsupportedMediaType(ServiceError):
    """A Content-Type no parser reads."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail, field="header.content-type", message="unsupported media type")


class NotAcceptable(ServiceError):
    """An ``Accept`` header that takes none of the media types a route can send."""

    def __init__(self, accept: str, offered: Sequence[str]) -> None:
        choices = ", ".join(offered)
        super().__init__(
            f"cannot answer with any type of Accept: {accept!r}; ask for one of {choices} "
            "(or send no Accept header for the default)",
            field="header.accept",
            message="no acceptable media type",
        )


class BodyTooLarge(ServiceError):
    """A body over its route's limit (refused before or while it streams, never buffered).

    ``setting`` names the variable that sets the limit; ``hint`` (appended to the detail)
    says what to send instead.
    """

    def __init__(
        self,
        max_bytes: int,
        setting: str = "RBFKM_MAX_UPLOAD_BYTES",
        hint: str = "; send a smaller dataset (split it, or in a denser format: .npy or "
        "Parquet), or raise the limit on the server",
    ) -> None:
        super().__init__(
            f"the body exceeds the limit of {max_bytes} bytes ({setting}){hint}",
            field="body",
            message=f"larger than {max_bytes} bytes",
        )
        self.max_bytes = max_bytes


class UnsafeUrl(ServiceError):
    """A URL the service will not open: its scheme, a host that does not resolve, or one that
    resolves to an address that is not public (see :mod:`service.urls`)."""

    def __init__(self, detail: str, message: str = "unsafe URL", field: str = "body") -> None:
        super().__init__(detail, field=field, message=message)


class SourceUnavailable(ServiceError):
    """A dataset's ``source`` (or a job's ``output``) the service could not read (write):
    unreachable, missing, refused, too slow; the detail says which and what to change."""

    def __init__(
        self, detail: str, message: str = "source unavailable", field: str = "body.source"
    ) -> None:
        super().__init__(detail, field=field, message=message)


class NotConfigured(ServiceError):
    """A feature the server is not set up for, for this tenant (no webhook secret); the
    detail names the setting an operator would set."""

    def __init__(self, detail: str, field: str = "body", message: str = "not configured") -> None:
        super().__init__(detail, field=field, message=message)


class DatasetNotFound(ServiceError, LookupError):
    """No stored dataset has this id (a job naming one fails at once: bad input)."""

    def __init__(self, dataset_id: str) -> None:
        super().__init__(
            f"dataset {dataset_id!r} not found",
            field="path.dataset_id",
            message="unknown dataset",
        )


#: Errors a job's input caused (bad parameters, a missing dataset): a worker fails the job at
#: once, without retries. ``DatasetNotFound`` is a ``LookupError``, listed for clarity.
NON_RETRYABLE: tuple[type[BaseException], ...] = (ValueError, TypeError, DatasetNotFound)


class ResultNotFound(ServiceError, KeyError):
    """No stored result for this job (never written, discarded, deleted or expired)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(
            f"no result for job {job_id!r}", field="path.job_id", message="no stored result"
        )


class ProjectionNotFound(ResultNotFound):
    """A stored result without a projection: written before the service recorded one."""

    def __init__(self, job_id: str) -> None:
        ServiceError.__init__(
            self,
            f"the result of job {job_id!r} was stored without a projection (by an older "
            "version of the service); run the job again to get one",
            field="path.job_id",
            message="no stored projection",
        )


class InvalidIdempotencyKey(ServiceError):
    """An ``Idempotency-Key`` of the wrong length."""


class IdempotencyKeyReused(ServiceError):
    """An ``Idempotency-Key`` already used with another request body."""


class IdempotencyKeyInProgress(ServiceError):
    """An ``Idempotency-Key`` whose first request is still being accepted (retry shortly)."""


class IdempotencyKeyContended(ServiceError):
    """An ``Idempotency-Key`` whose marker kept changing under the request (retry)."""


class UploadInterrupted(ServiceError):
    """The client closed the connection before its body was complete (nothing is stored)."""

    def __init__(self, received: int) -> None:
        super().__init__(
            f"the client closed the connection after {received} bytes of the body; "
            "nothing was stored",
            field="body",
            message="incomplete body",
        )
        self.received = received


class JobTooLarge(ServiceError):
    """A job whose memory on a worker would exceed the worker budget (refused before it is
    queued: it would fail on every attempt)."""

    def __init__(self, detail: str) -> None:
        super().__init__(
            detail, field="body.n_clusters", message="the job exceeds the worker's memory budget"
        )


class QuotaExceeded(ServiceError):
    """A tenant at one of its quotas (:class:`service.tenants.Quota`); it may retry once
    it has less, ``retry_after_s`` says when to look again."""

    retry_after_s: int = 1


class TooManyActiveJobs(QuotaExceeded):
    """A tenant that already has its quota of queued and running jobs."""

    def __init__(self, tenant: str, limit: int) -> None:
        super().__init__(
            f"tenant {tenant!r} already has {limit} queued or running jobs, its quota; "
            "wait for one to finish (or cancel one) and retry",
            field="body",
            message=f"at most {limit} unfinished jobs",
        )


class StorageQuotaExceeded(QuotaExceeded):
    """A tenant whose stored datasets and results would exceed its quota of bytes."""

    retry_after_s = 60

    def __init__(self, tenant: str, used: int, incoming: int, limit: int) -> None:
        super().__init__(
            f"tenant {tenant!r} stores {used} bytes of datasets and results; {incoming} more "
            f"would exceed its quota of {limit} bytes: delete datasets or jobs it no longer "
            "needs (DELETE /v1/datasets/{id}, DELETE /v1/jobs/{id}) and retry",
            field="body",
            message=f"over the quota of {limit} stored bytes",
        )
