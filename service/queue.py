"""Reliable job queue on Redis Streams: submit, claim, lease, fence, retry, dead-letter.

The keys and the scripts that change them are in :mod:`service.lua`.

Why no job is lost: a job is created and its entry added in one script, so a job hash always
has an entry in the stream. An entry stays in the consumer group's pending list (PEL) from
the moment a worker reads it until a script that has already written the job's final state
(succeeded with its result meta, failed, canceled) acknowledges it; the worker writes the
result files before it calls :meth:`JobQueue.succeed`. If the worker dies, its entry stays
pending, goes idle, and after ``lease_s`` another worker's :meth:`JobQueue.claim` takes it
with ``XAUTOCLAIM``. Retries acknowledge the old entry and add a fresh one in the same
script (a retry is immediate and runs wherever a worker is free; a reclaim would wait out
a whole lease for nothing, since the failing worker is alive and said so).

Why no job runs to completion twice: ``attempts`` is a fencing token. Every claim raises it
in the same script that sets the job running, and every later write of a worker (progress,
success, failure, cancel) is a script that first checks ``attempts == claim.attempt`` and
``status == running``; a worker whose lease lapsed and whose job was claimed again holds an
older number and changes nothing — its :meth:`succeed` returns False and it discards its
files (each attempt writes its own directory, so it never touches the winner's). A job that
has finished is never started again: a claim of an entry whose job is finished, canceled,
deleted or superseded by a newer entry only acknowledges it. The claim script also checks
that the entry is still this consumer's, so a worker that read an entry and stalled before
starting it cannot start it after another worker took it over.

Cancel: a queued job is canceled at once (its entry is acknowledged when a worker meets
it); a running job gets a flag that its worker polls; once it is set, :meth:`succeed`
refuses, so a cancel accepted while the job runs always ends it canceled.

The reaper: :meth:`JobQueue.claim` itself takes over lapsed entries first, and busy workers
call :meth:`JobQueue.reap` with each heartbeat, which moves a lapsed entry back to the
queue as a fresh entry (or dead-letters it), so a dead worker's job shows as queued and
is picked up even when no worker is idle.

Why a long job is not reclaimed: while a job runs, its worker renews the lease every
``lease_s / 3`` with ``XCLAIM ... JUSTID`` on its own consumer, which resets the entry's
idle time; ``XAUTOCLAIM`` only takes entries idle longer than ``lease_s``. The renewal is a
script that also checks the fence and that the entry is still this consumer's, so a stale
worker cannot pull back an entry another worker has taken.

A worker that shuts down gracefully hands its job back (:meth:`JobQueue.release`): queued
again at once with a fresh entry; a hand-back does not use up an attempt.

A job claimed for the ``max_attempts + 1``-th time (its workers kept dying) goes to the
dead-letter stream with status failed (``GET /v1/jobs/dead-letters`` lists it); so does a
job whose last allowed attempt failed with a retryable error, and at once one that failed
on bad input. Finished jobs' hashes expire after ``ttl_s``. Every transition is one Lua
script, so it is atomic. The guarantees hold as long as Redis keeps its writes: run it
with AOF persistence (as the docker-compose file does); a crash of Redis itself can lose
the last second of writes.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import math
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from service.common import now_stamps, stream_entries, text
from service.errors import TooManyActiveJobs
from service.jobs import (
    EMPTY_PROGRESS,
    STATUSES,
    UNFINISHED,
    JobStatus,
    job_record,
    progress_record,
)
from service.lua import DROP_CONSUMER, JOB_SCRIPTS, PRUNE
from service.tenants import DEFAULT_TENANT

if TYPE_CHECKING:
    from service.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Claim:
    """A worker's hold on one attempt of a job; ``attempt`` is the fencing token."""

    job_id: str
    attempt: int
    entry_id: str
    consumer: str
    dataset_id: str
    params: dict[str, Any]


class JobQueue:
    """The job queue and job state shared by the HTTP layer and the workers."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = "rbfkm",
        lease_s: float = 30.0,
        max_attempts: int = 3,
        ttl_s: float = 7 * 24 * 3600,
        group: str = "workers",
        worker_ttl_s: float | None = None,
    ) -> None:
        if lease_s <= 0 or max_attempts < 1 or ttl_s <= 0:
            raise ValueError("lease_s and ttl_s must be > 0 and max_attempts >= 1")
        self.client = client
        self.prefix = prefix
        self.lease_s = float(lease_s)
        self.max_attempts = int(max_attempts)
        self.ttl_s = max(1, math.ceil(ttl_s))
        self.group = group
        # A worker polls at least every couple of seconds when idle; keep its key a while
        # longer than the lease so one slow poll does not flap readiness.
        self.worker_ttl_s = float(worker_ttl_s) if worker_ttl_s else max(self.lease_s, 5.0)
        self.stream = f"{prefix}:jobs"
        self.dead_stream = f"{prefix}:jobs:dead"
        self._index = f"{prefix}:jobs:index"
        self._workers = f"{prefix}:workers"
        self._scripts = {name: client.register_script(body) for name, body in JOB_SCRIPTS.items()}
        self._prune = client.register_script(PRUNE)
        self._drop_consumer = client.register_script(DROP_CONSUMER)
        # Redis down (a worker process started during an outage): the group is created by
        # register_worker, or on the NOGROUP of the first claim, once it is back.
        with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
            self.ensure_group()

    @classmethod
    def from_settings(cls, client: redis.Redis, settings: Settings) -> JobQueue:
        """A queue configured like the rest of the service."""
        return cls(
            client,
            prefix=settings.key_prefix,
            lease_s=settings.lease_s,
            max_attempts=settings.max_attempts,
            ttl_s=settings.result_ttl_s,
        )

    # ---- helpers -------------------------------------------------------------------------

    def job_key(self, job_id: str) -> str:
        """The Redis key of a job's hash."""
        return f"{self.prefix}:job:{job_id}"

    def _status_key(self, status: JobStatus, tenant: str | None = None) -> str:
        """The sorted set of jobs in ``status``: every tenant's, or one tenant's."""
        if tenant is None:
            return f"{self.prefix}:jobs:status:{status}"
        return f"{self._tenant_prefix(tenant)}:status:{status}"

    def _tenant_prefix(self, tenant: str) -> str:
        return f"{self.prefix}:tenant:{tenant}:jobs"

    def _index_key(self, tenant: str | None) -> str:
        return self._index if tenant is None else f"{self._tenant_prefix(tenant)}:index"

    def _call(self, script: str, job_id: str, *args: Any) -> Any:
        return self._scripts[script](
            keys=[self.job_key(job_id)], args=[self.prefix, self.group, job_id, *args]
        )

    def ensure_group(self) -> None:
        """Create the stream and its consumer group if they are missing (idempotent)."""
        try:
            self.client.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    # ---- API side ------------------------------------------------------------------------

    def submit(
        self,
        dataset_id: str,
        params: dict[str, Any],
        *,
        job_id: str | None = None,
        tenant: str = DEFAULT_TENANT,
        max_active: int = 0,
    ) -> dict[str, Any]:
        """Create a queued job of ``tenant`` and enqueue its id; an existing ``job_id`` is
        returned as is. TooManyActiveJobs when the tenant already has ``max_active``
        queued or running jobs (0: no cap); the check and the enqueue are one script."""
        job_id = job_id or uuid.uuid4().hex
        now_iso, now_ts = now_stamps()
        created = self._call(
            "submit",
            job_id,
            dataset_id,
            json.dumps(params, separators=(",", ":")),
            now_iso,
            now_ts,
            json.dumps(EMPTY_PROGRESS),
            tenant,
            max_active,
        )
        if int(created) < 0:
            raise TooManyActiveJobs(tenant, max_active)
        job = self.get(job_id)
        assert job is not None
        return job

    def get(self, job_id: str) -> dict[str, Any] | None:
        """The job as ``GET /v1/jobs/{id}`` serves it, or None."""
        return job_record(self.client.hgetall(self.job_key(job_id)))

    def _prune_expired(self) -> None:
        self._prune(args=[self.prefix, f"{time.time():.6f}", 1000])

    def list(
        self,
        *,
        status: str | None = None,
        offset: int = 0,
        limit: int = 50,
        tenant: str | None = None,
    ) -> tuple[builtins.list[dict[str, Any]], int]:
        """A page of jobs, newest first, optionally of one status, and the total count:
        one tenant's, or every tenant's for ``tenant=None``."""
        if status is not None and status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, not {status!r}")
        if offset < 0 or limit < 0:
            raise ValueError("offset and limit must be >= 0")
        self._prune_expired()
        index = self._index_key(tenant) if status is None else self._status_key(status, tenant)
        total = int(self.client.zcard(index))
        if limit == 0:
            return [], total
        ids = self.client.zrevrange(index, offset, offset + limit - 1)
        pipe = self.client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hgetall(self.job_key(text(job_id)))
        jobs = [job for job in map(job_record, pipe.execute()) if job is not None]
        return jobs, total

    def cancel(self, job_id: str) -> dict[str, Any] | None:
        """Cancel: a queued job at once, a running one at its next iteration; None if unknown."""
        now_iso, now_ts = now_stamps()
        if self._call("cancel", job_id, now_iso, now_ts, self.ttl_s) is None:
            return None
        return self.get(job_id)

    def delete(self, job_id: str) -> bool:
        """Forget a job (its worker, if any, stops); result files are the caller's to delete."""
        return bool(self._call("delete", job_id))

    def status_counts(self, tenant: str | None = None) -> dict[str, int]:
        """How many known jobs (of one tenant, or of all) are in each status."""
        self._prune_expired()
        pipe = self.client.pipeline(transaction=False)
        for status in STATUSES:
            pipe.zcard(self._status_key(status, tenant))
        return {status: int(n) for status, n in zip(STATUSES, pipe.execute(), strict=True)}

    def active(self, tenant: str) -> int:
        """The tenant's queued and running jobs (what its concurrency quota counts)."""
        pipe = self.client.pipeline(transaction=False)
        for status in UNFINISHED:
            pipe.zcard(self._status_key(status, tenant))
        return int(sum(pipe.execute()))

    def result_bytes(self, tenant: str) -> int:
        """The bytes of the tenant's stored results (its storage quota counts them)."""
        ids = self.client.zrange(self._status_key(JobStatus.SUCCEEDED, tenant), 0, -1)
        pipe = self.client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hget(self.job_key(text(job_id)), "result")
        metas = [json.loads(raw) for raw in pipe.execute() if raw]
        return int(sum(meta.get("stored_bytes", 0) for meta in metas))

    def depth(self) -> int:
        """Jobs waiting for a worker."""
        return int(self.client.zcard(self._status_key(JobStatus.QUEUED)))

    def dead_letters(
        self, *, offset: int = 0, limit: int = 50, tenant: str | None = None
    ) -> tuple[builtins.list[dict[str, Any]], int]:
        """A page of the dead-letter stream (one tenant's, or every tenant's), newest
        first, and its length.

        Each item: ``job_id``, ``error``, ``attempts`` (the job's claims when it was given up)
        and ``failed_at``. The stream outlives the jobs' hashes (it is capped at about
        100 000 entries, a tenant's at 10 000, not expired), so it is where an operator
        finds what failed and why.
        """
        if offset < 0 or limit < 0:
            raise ValueError("offset and limit must be >= 0")
        stream = self.dead_stream if tenant is None else f"{self._tenant_prefix(tenant)}:dead"
        total = int(self.client.xlen(stream))
        if limit == 0 or offset >= total:
            return [], total
        entries = self.client.xrevrange(stream, count=offset + limit)[offset:]
        items = []
        for _, raw in entries:
            fields = {text(k): text(v) for k, v in raw.items()}
            items.append(
                {
                    "job_id": fields.get("job"),
                    "error": fields.get("error"),
                    "attempts": int(fields.get("attempts") or 0),
                    "failed_at": fields.get("at"),
                    "tenant": fields.get("tenant") or DEFAULT_TENANT,
                }
            )
        return items, total

    # ---- workers -------------------------------------------------------------------------

    def _worker_key(self, consumer: str) -> str:
        return f"{self.prefix}:worker:{consumer}"

    def register_worker(self, consumer: str) -> None:
        """Announce a worker (readiness counts it while its heartbeat key lives)."""
        self.ensure_group()
        self.worker_heartbeat(consumer)

    def worker_heartbeat(self, consumer: str) -> None:
        """Refresh the worker's heartbeat key; it expires ``worker_ttl_s`` after the last."""
        pipe = self.client.pipeline(transaction=False)
        pipe.set(self._worker_key(consumer), now_stamps()[0], px=int(self.worker_ttl_s * 1000))
        pipe.sadd(self._workers, consumer)
        pipe.execute()

    def unregister_worker(self, consumer: str) -> None:
        """A clean shutdown: drop the heartbeat and the consumer if it holds no entries."""
        pipe = self.client.pipeline(transaction=False)
        pipe.delete(self._worker_key(consumer))
        pipe.srem(self._workers, consumer)
        pipe.execute()
        with contextlib.suppress(redis.ResponseError):  # no group (flushed): nothing to drop
            self._drop_consumer(args=[self.stream, self.group, consumer])

    def workers_alive(self) -> int:
        """Workers whose heartbeat key has not expired (dead names are forgotten)."""
        names = [text(n) for n in self.client.smembers(self._workers)]
        if not names:
            return 0
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.exists(self._worker_key(name))
        alive = pipe.execute()
        dead = [name for name, ok in zip(names, alive, strict=True) if not ok]
        if dead:
            self.client.srem(self._workers, *dead)
        return len(names) - len(dead)

    def _triage(self, script: str, entry_id: str, fields: Any, consumer: str) -> Any:
        """Run the claim or reap script on a delivered entry; None if it names no job."""
        job_id = text((fields or {}).get(b"job", (fields or {}).get("job")))
        if job_id is None:  # not one of ours, or its body was trimmed: nothing to run
            self.client.xack(self.stream, self.group, entry_id)
            return None
        now_iso, now_ts = now_stamps()
        reply = self._call(
            script,
            job_id,
            entry_id,
            consumer,
            self.max_attempts,
            now_iso,
            now_ts,
            self.ttl_s,
            json.dumps(EMPTY_PROGRESS),
        )
        outcome = text(reply[0])
        if outcome == "dead":
            log.warning("job %s dead-lettered after %s attempts", job_id, reply[1])
        elif outcome not in ("run", "requeued"):
            log.debug("entry %s of job %s skipped: %s", entry_id, job_id, reply[1:])
        return job_id, outcome, reply

    def _start(self, entry_id: str, fields: Any, consumer: str) -> Claim | None:
        """Turn a delivered entry into a claim, or acknowledge it if there is nothing to run."""
        triaged = self._triage("claim", entry_id, fields, consumer)
        if triaged is None or triaged[1] != "run":
            return None
        job_id, _, reply = triaged
        return Claim(
            job_id=job_id,
            attempt=int(reply[1]),
            entry_id=entry_id,
            consumer=consumer,
            dataset_id=text(reply[2]),
            params=json.loads(text(reply[3])),
        )

    def _lapsed(self, consumer: str) -> Iterator[tuple[str, Any]]:
        """Take over pending entries idle longer than the lease, one at a time."""
        lease_ms = max(1, int(self.lease_s * 1000))
        cursor: Any = "0-0"
        for _ in range(1000):  # one entry per call: taking more would hold them idle
            try:
                reply = self.client.xautoclaim(
                    self.stream, self.group, consumer, lease_ms, start_id=cursor, count=1
                )
            except redis.ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                self.ensure_group()
                return
            cursor = text(reply[0])
            for entry_id, fields in reply[1]:
                yield text(entry_id), fields
            if cursor == "0-0":
                return

    def reap(self, consumer: str, limit: int = 10) -> int:
        """Requeue (or dead-letter) up to ``limit`` jobs whose worker's lease lapsed.

        Busy workers call this from their heartbeat, so a dead worker's job goes back to
        the queue (and shows as queued) even when no worker is idle to reclaim it.
        """
        done = 0
        for entry_id, fields in self._lapsed(consumer):
            triaged = self._triage("reap", entry_id, fields, consumer)
            if triaged is not None and triaged[1] in ("requeued", "dead"):
                done += 1
                if done >= limit:
                    break
        return done

    def claim(self, consumer: str, block_ms: int = 1000) -> Claim | None:
        """Take one job: first an entry whose lease lapsed, then a new one; None if none."""
        for entry_id, fields in self._lapsed(consumer):
            claim = self._start(entry_id, fields, consumer)
            if claim is not None:
                return claim
        deadline = time.monotonic() + block_ms / 1000
        while True:
            wait_ms = max(1, int((deadline - time.monotonic()) * 1000)) if block_ms else None
            try:
                reply = self.client.xreadgroup(
                    self.group, consumer, {self.stream: ">"}, count=1, block=wait_ms
                )
            except redis.ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                self.ensure_group()
                continue
            entries = stream_entries(reply)
            if not entries:
                return None
            for entry_id, fields in entries:
                claim = self._start(entry_id, fields, consumer)
                if claim is not None:
                    return claim
            if block_ms and time.monotonic() >= deadline:
                return None

    def renew(self, claim: Claim) -> bool:
        """Reset the lease's idle time; False when fenced out, canceled or deleted."""
        return bool(
            self._call("renew", claim.job_id, claim.entry_id, claim.consumer, claim.attempt)
        )

    def stop_reason(self, claim: Claim) -> str | None:
        """Why the worker should stop now ("canceled", "deleted", "fenced"), or None (cheap)."""
        status, attempts, cancel = self.client.hmget(
            self.job_key(claim.job_id), "status", "attempts", "cancel"
        )
        if status is None:
            return "deleted"
        if text(status) != JobStatus.RUNNING or int(attempts) != claim.attempt:
            return "fenced"
        if text(cancel) == "1":
            return "canceled"
        return None

    def report_progress(
        self,
        claim: Claim,
        *,
        fraction: float | None,
        sigma: float | None,
        iteration: int | None,
        objective: float | None,
    ) -> bool:
        """Store progress; False means stop (fenced out, canceled or deleted)."""
        progress = progress_record(fraction, sigma, iteration, objective)
        return bool(self._call("progress", claim.job_id, claim.attempt, json.dumps(progress)))

    def succeed(self, claim: Claim, result_meta: dict[str, Any]) -> bool:
        """Commit the result and acknowledge; False (nothing changed) if fenced or canceled."""
        now_iso, now_ts = now_stamps()
        return bool(
            self._call(
                "succeed",
                claim.job_id,
                claim.entry_id,
                claim.attempt,
                json.dumps(result_meta),
                now_iso,
                now_ts,
                self.ttl_s,
            )
        )

    def fail(self, claim: Claim, error: str, *, retryable: bool) -> str:
        """Record a failure: requeue (retryable, attempts left) or fail and dead-letter.

        Returns the job's status afterwards ("queued", "failed", "canceled" when a cancel was
        pending, "deleted" when the job is gone), or its unchanged status when fenced out.
        """
        now_iso, now_ts = now_stamps()
        reply = self._call(
            "fail",
            claim.job_id,
            claim.entry_id,
            claim.attempt,
            error,
            "1" if retryable else "0",
            self.max_attempts,
            now_iso,
            now_ts,
            self.ttl_s,
        )
        return text(reply)

    def mark_canceled(self, claim: Claim) -> bool:
        """End a running attempt as canceled (also acknowledges the entry of a deleted job)."""
        now_iso, now_ts = now_stamps()
        return bool(
            self._call(
                "mark_canceled",
                claim.job_id,
                claim.entry_id,
                claim.attempt,
                now_iso,
                now_ts,
                self.ttl_s,
            )
        )

    def release(self, claim: Claim) -> str:
        """Hand a running job back (worker shutting down): queued again at once.

        A hand-back does not use up one of ``max_attempts`` (the fencing token still grows
        on the next claim). Returns the status afterwards, as :meth:`fail` does.
        """
        now_iso, now_ts = now_stamps()
        reply = self._call(
            "release", claim.job_id, claim.entry_id, claim.attempt, now_iso, now_ts, self.ttl_s
        )
        return text(reply)
