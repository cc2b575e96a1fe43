"""The worker: claims jobs, runs ``RBFKMeans`` fits, reports progress, stores results.

One job per device at a time: a worker holds an OS file lock on its device (in the local
temp directory, so it is per machine, and named after the deployment: key prefix and data
directory) from before it claims a job until the job is done;
several worker processes on one GPU therefore take turns, and a worker that waits for the
device does not hold a job meanwhile. While a job runs, a background thread renews the
lease every ``lease_s / 3`` (so jobs longer than the reclaim window keep their lease) and
polls the job's cancel flag and fence every ``poll_s``; the fit's callback only reads a
local flag on every iteration and writes progress to Redis at most every
``progress_interval_s``, so the hot loop stays free of network round trips.

Every attempt has a time limit (the job's ``max_runtime_s``, filled in by the API from
``RBFKM_MAX_RUNTIME_S``), counted from the claim: the fit gets a ``should_stop`` check
that reads the local flags (cancel or fencing noticed by the lease thread, shutdown) and
the clock, which the engine polls between the blocks of every pass and the steps of its
other long loops. A stop request therefore ends the fit within one block of work (it
raises ``FitInterrupted``: no last pass, nothing to keep). A job past its limit fails at
once, not retried (it would only run out of time again), dead-lettered with a message
that names the limit and what to change. The limit is per attempt: an attempt that takes
over a dead worker's job starts its own clock, so a job runs at most ``max_attempts``
times its limit in all.

Processes are started with the ``spawn`` method, never ``fork``: CUDA does not survive a
fork, and a forked child would share the parent's Redis connections.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import numpy as np
import redis

from service import threads as threads_module
from service.datasets import dataset_weights, load_dataset
from service.devices import (
    DeviceLock,
    DeviceLocks,
    device_for_index,
    job_device,
    worker_device,
)
from service.errors import NON_RETRYABLE
from service.jobs import OUTPUT_FAILED
from service.logs import OutageLog
from service.outputs import OutputWriter
from service.parallel import (
    RankGroup,
    RankJob,
    attempt_prefix,
    fit_parallel,
    group_timeout_s,
    rank_devices,
    remove_leftovers,
    world_size,
)
from service.parallel import capacity as parallel_capacity
from service.params import default_estimator, engine_params, runtime_limit
from service.queue import Claim, JobQueue
from service.results import ResultStore
from service.settings import Settings
from service.tenants import DEFAULT_TENANT
from service.webhooks import start_sender

log = logging.getLogger(__name__)

LoadDataset = Callable[[str], np.ndarray]
#: Copies a stored result to a job's ``output``: (url, job id, tenant, metadata) -> record.
WriteOutput = Callable[[str, str, str, dict[str, Any]], dict[str, Any]]

#: The stop reason of an attempt that ran past its job's ``max_runtime_s``.
TIMED_OUT = "timed out"


def dataset_loader(data_dir: Path | str) -> LoadDataset:
    """The datasets of ``data_dir`` by id, memory-mapped (the store's one loader)."""
    return functools.partial(load_dataset, data_dir)


class _LeaseKeeper:
    """Background thread while a job runs: renews the lease, reaps dead workers' jobs, and
    notices cancel or fencing."""

    def __init__(
        self,
        queue: JobQueue,
        claim: Claim,
        heartbeat_s: float,
        poll_s: float,
        outage: OutageLog | None = None,
    ):
        self.queue = queue
        self.claim = claim
        self.outage = outage or OutageLog(log)
        self.heartbeat_s = heartbeat_s
        self.poll_s = min(poll_s, heartbeat_s)
        self.reason: str | None = None  # why the job must stop; read on every iteration
        self.deadline: float | None = None  # time.monotonic() when the attempt's time is up
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{claim.job_id}", daemon=True)

    def stop_with(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason

    def should_stop(self) -> bool:
        """Whether the fit must stop now (cancel or fencing noticed, or time is up); cheap:
        the engine calls it between the blocks of its passes."""
        deadline = self.deadline
        if self.reason is None and deadline is not None and time.monotonic() >= deadline:
            self.stop_with(TIMED_OUT)
        return self.reason is not None

    def _run(self) -> None:
        next_renew = time.monotonic() + self.heartbeat_s
        while not self._done.wait(self.poll_s):
            try:
                renewed = False
                if time.monotonic() >= next_renew:
                    next_renew = time.monotonic() + self.heartbeat_s
                    renewed = self.queue.renew(self.claim)
                    self.queue.worker_heartbeat(self.claim.consumer)
                    self.queue.reap(self.claim.consumer)  # dead workers' jobs back to the queue
                reason = None if renewed else self.queue.stop_reason(self.claim)
                if reason is not None:
                    self.stop_with(reason)
            except redis.RedisError as exc:  # keep trying: the lease outlives short outages
                self.outage.failure(exc, f"lease of job {self.claim.job_id}")
            else:
                self.outage.success()

    def __enter__(self) -> _LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


@dataclass(frozen=True)
class Timing:
    """How often a worker does its chores besides the fit.

    ``heartbeat_s``: lease renewal, heartbeat and reaping while a job runs (None: a third of
    the queue's lease); ``poll_s``: checks of the job's cancel flag and fence;
    ``progress_interval_s``: the least time between two progress writes; ``purge_every_s``:
    deletion of results past their retention.
    """

    heartbeat_s: float | None = None
    poll_s: float = 0.1
    progress_interval_s: float = 0.2
    purge_every_s: float = 3600.0


class Worker:
    """Claims one job at a time from the queue and runs it on one device."""

    def __init__(
        self,
        queue: JobQueue,
        results: ResultStore,
        load_dataset: LoadDataset,
        *,
        device: str = "auto",
        consumer: str | None = None,
        estimator: Callable[..., Any] | None = None,
        lock_dir: Path | str | None = None,
        timing: Timing = Timing(),  # frozen: one shared default is safe
        max_runtime_s: float | None = None,
        max_runtime_cap_s: float | None = None,
        load_weights: Callable[[str], np.ndarray | None] | None = None,
        worker_procs: int = 1,
        write_output: WriteOutput | None = None,
    ) -> None:
        """``max_runtime_s``: the time limit of a job that stores none (one queued before
        jobs had limits; ``None``: no limit); ``max_runtime_cap_s``: the server's cap, which
        a timed-out job's error names; ``worker_procs``: the processes a job's
        ``"parallel"`` may have on the CPU (:mod:`service.parallel`; a parallel job's
        ``estimator`` and loaders must then be importable, the ranks unpickle them);
        ``write_output``: copies a result to a job's ``output``
        (:class:`service.outputs.OutputWriter`; None: such jobs record that this worker
        cannot)."""
        self.queue = queue
        self.results = results
        self.load_dataset = load_dataset
        self.load_weights = load_weights
        self.device = worker_device(device)
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        heartbeat_s = timing.heartbeat_s
        self.heartbeat_s = heartbeat_s if heartbeat_s is not None else queue.lease_s / 3
        self.poll_s = timing.poll_s
        self.progress_interval_s = timing.progress_interval_s
        self.estimator = estimator
        scope = f"{queue.prefix}@{results.root.resolve()}"
        self.device_lock = DeviceLock(self.device, lock_dir, scope=scope)
        self._locking = (lock_dir, scope)  # of the other GPUs of a parallel job
        self.worker_procs = worker_procs
        #: The ranks of the parallel fit running now (None when there is none).
        self.ranks: RankGroup | None = None
        self.purge_every_s = timing.purge_every_s
        self.max_runtime_s = max_runtime_s
        self.max_runtime_cap_s = max_runtime_cap_s
        self.write_output = write_output
        self._stop: threading.Event | None = None  # set by run(): hand the job back
        #: One outage log for the loop, the lease thread and the progress writes: a lost
        #: Redis is one line (and a reminder now and then), not one per failed call.
        self.redis_log = OutageLog(log)

    def run_once(self, block_ms: int = 1000) -> str | None:
        """Claim at most one job and run it to its end; returns its id, or None if none."""
        self.queue.worker_heartbeat(self.consumer)
        if not self.device_lock.acquire(block_ms / 1000):
            return None
        try:
            claim = self.queue.claim(self.consumer, block_ms=block_ms)
            if claim is None:
                return None
            self._execute(claim)
            return claim.job_id
        finally:
            self.device_lock.release()

    def run(self, stop: threading.Event, block_ms: int = 1000) -> None:
        """Run jobs until ``stop`` is set; a running job stops and is handed back at once."""
        self._stop = stop
        log.info("worker %s started on %s", self.consumer, self.device)
        next_purge = time.monotonic()
        registered = False
        try:
            while not stop.is_set():
                try:
                    if not registered:  # in the loop: one started while Redis is down waits
                        self.queue.register_worker(self.consumer)
                        registered = True
                    if time.monotonic() >= next_purge:
                        next_purge = time.monotonic() + self.purge_every_s
                        self.results.purge(self.queue.ttl_s)
                    self.run_once(block_ms=block_ms)
                except redis.RedisError as exc:
                    self.redis_log.failure(exc, f"worker {self.consumer}")
                    stop.wait(1.0)
                except Exception:
                    log.exception("worker %s: unexpected error", self.consumer)
                    stop.wait(1.0)
                else:
                    self.redis_log.success()
        finally:
            with contextlib.suppress(redis.RedisError):
                self.queue.unregister_worker(self.consumer)
            log.info("worker %s stopped", self.consumer)

    # ---- one job -------------------------------------------------------------------------

    def _execute(self, claim: Claim) -> None:
        log.info("job %s attempt %d started by %s", claim.job_id, claim.attempt, self.consumer)
        with _LeaseKeeper(
            self.queue, claim, self.heartbeat_s, self.poll_s, self.redis_log
        ) as keeper:
            try:
                limit_s = runtime_limit(claim.params, self.max_runtime_s)
                if limit_s is not None:  # per attempt, from its claim
                    keeper.deadline = time.monotonic() + limit_s
                model, X, processes = self._fit(claim, keeper)
                reason = keeper.reason or self.queue.stop_reason(claim)
                if reason is not None:
                    self._stopped(claim, reason, limit_s)
                    return
                meta = self.results.save(
                    claim.job_id, model, X, attempt=claim.attempt, processes=processes
                )
                self._output(claim, meta)
                if self.queue.succeed(claim, meta):
                    self.results.prune(claim.job_id, keep=claim.attempt)
                    log.info("job %s attempt %d succeeded", claim.job_id, claim.attempt)
                    return
                # Fenced out or canceled between the fit and the commit: these files are
                # this attempt's alone (never the winner's), so they go.
                self.results.discard(claim.job_id, claim.attempt)
                self._stopped(claim, self.queue.stop_reason(claim) or "fenced")
            except NON_RETRYABLE as exc:
                message = str(exc) or type(exc).__name__
                status = self.queue.fail(claim, message, retryable=False)
                log.info("job %s failed on bad input (%s): %s", claim.job_id, status, message)
            except redis.RedisError:
                raise  # the entry stays pending and is reclaimed after the lease
            except Exception as exc:
                log.exception("job %s attempt %d crashed", claim.job_id, claim.attempt)
                status = self.queue.fail(claim, f"{type(exc).__name__}: {exc}", retryable=True)
                log.info("job %s is now %s", claim.job_id, status)

    def _output(self, claim: Claim, meta: dict[str, Any]) -> None:
        """Copy the saved result to the job's ``output``, if it has one, and record the
        outcome in ``meta`` (committed with the result); a failed copy fails nothing."""
        url = claim.params.get("output")
        if not url:
            return
        if self.write_output is None:
            error = "this worker was started without storage settings; run the job again"
            meta["output"] = {"url": url, "status": OUTPUT_FAILED, "error": error}
            return
        tenant = (self.queue.get(claim.job_id) or {}).get("tenant") or DEFAULT_TENANT
        meta["output"] = self.write_output(
            url, claim.job_id, tenant, {"job_id": claim.job_id, **meta}
        )

    def _fit(self, claim: Claim, keeper: _LeaseKeeper) -> tuple[Any | None, np.ndarray, int]:
        """The fitted model (``None`` when the fit was stopped: ``keeper.reason`` says why),
        the data and the number of processes that fitted it."""
        from rbfkm_engine.progress import FitInterrupted

        X = self.load_dataset(claim.dataset_id)
        device = job_device(claim.params, self.device)
        requested = claim.params.get("parallel")
        world = world_size(requested, parallel_capacity(device, self.worker_procs))
        if isinstance(requested, int) and requested > world:
            log.warning(
                "job %s asks for parallel=%s; it runs on the %d processes this worker offers",
                claim.job_id,
                requested,
                world,
            )
        should_stop = self._stop_check(keeper)
        if world > 1:
            devices = rank_devices(device, world)
            return self._fit_parallel(claim, keeper, devices, should_stop), X, world
        weights = None if self.load_weights is None else self.load_weights(claim.dataset_id)
        estimator = self.estimator or default_estimator()
        model = estimator(**engine_params(claim.params), device=device)
        report = self._progress_writer(claim, keeper)

        def callback(progress: Any) -> bool:
            if should_stop():
                return True
            return report(progress.fraction, progress.sigma, progress.iteration, progress.objective)

        try:
            model.fit(X, sample_weight=weights, callback=callback, should_stop=should_stop)
        except FitInterrupted:
            return None, X, 1
        return model, X, 1

    def _stop_check(self, keeper: _LeaseKeeper) -> Callable[[], bool]:
        """Whether the job must stop now: cancel, fencing, time, or this worker's shutdown."""

        def should_stop() -> bool:
            if self._stop is not None and self._stop.is_set():
                keeper.stop_with("shutdown")
            return keeper.should_stop()

        return should_stop

    def _progress_writer(self, claim: Claim, keeper: _LeaseKeeper) -> Callable[..., bool]:
        """Writes a fit's progress to the job, at most every ``progress_interval_s``;
        answers whether the job must stop (canceled or fenced, found on the way)."""
        last_write = -float("inf")

        def report(fraction: Any, sigma: Any, iteration: Any, objective: Any) -> bool:
            nonlocal last_write
            now = time.monotonic()
            if now - last_write < self.progress_interval_s:
                return False
            last_write = now
            try:
                keep_going = self.queue.report_progress(
                    claim, fraction=fraction, sigma=sigma, iteration=iteration, objective=objective
                )
            except redis.RedisError as exc:
                self.redis_log.failure(exc, f"progress of job {claim.job_id}")
                return False
            self.redis_log.success()
            if not keep_going:
                keeper.stop_with(self.queue.stop_reason(claim) or "fenced")
            return not keep_going

        return report

    def _fit_parallel(
        self,
        claim: Claim,
        keeper: _LeaseKeeper,
        devices: list[str],
        should_stop: Callable[[], bool],
    ) -> Any | None:
        """The job fitted by one rank process per device of ``devices``
        (:mod:`service.parallel`); ``None`` when it was stopped."""
        import tempfile

        import torch

        others = [name for name in devices if name != self.device and name != "cpu"]
        locks = None
        if others:  # every GPU of the job, in one order, none held meanwhile
            self.device_lock.release()
            locks = DeviceLocks(devices, *self._locking)
            if not locks.acquire(should_stop):
                return None
        deadline = keeper.deadline
        limit_s = None if deadline is None else deadline - time.monotonic()
        job = RankJob(
            dataset_id=claim.dataset_id,
            params=engine_params(claim.params),
            devices=devices,
            load_dataset=self.load_dataset,
            load_weights=self.load_weights,
            estimator=self.estimator,
            timeout_s=group_timeout_s(limit_s),
            threads=max(1, torch.get_num_threads() // len(devices)),
            progress_interval_s=self.progress_interval_s,
        )
        report = self._progress_writer(claim, keeper)

        def started(group: RankGroup) -> None:
            self.ranks = group

        try:
            remove_leftovers(claim.job_id)
            with tempfile.TemporaryDirectory(prefix=attempt_prefix(claim.job_id)) as directory:
                return fit_parallel(
                    job,
                    Path(directory),
                    should_stop=should_stop,
                    report=lambda progress: report(**progress),
                    poll_s=self.poll_s,
                    started=started,
                )
        finally:
            self.ranks = None
            if locks is not None:
                locks.release()

    def _stopped(self, claim: Claim, reason: str, limit_s: float | None = None) -> None:
        """End an attempt that was told to stop: canceled, deleted or timed out end the job;
        fenced not."""
        if reason == TIMED_OUT and limit_s is not None:  # only a limit times out
            message = self._timeout_message(limit_s)
            status = self.queue.fail(claim, message, retryable=False)
            log.info("job %s attempt %d timed out (%s)", claim.job_id, claim.attempt, status)
        elif reason == "shutdown":
            status = self.queue.release(claim)
            log.info("job %s handed back on shutdown (%s)", claim.job_id, status)
        elif reason in ("canceled", "deleted"):
            self.queue.mark_canceled(claim)  # for a deleted job this just acknowledges
            log.info("job %s %s while running", claim.job_id, reason)
        else:  # another attempt owns the job now: touch nothing of it
            log.warning("job %s attempt %d fenced out; dropped", claim.job_id, claim.attempt)

    def _timeout_message(self, limit_s: float) -> str:
        """The error of a job that ran out of time: the limit and what to change."""
        cap = self.max_runtime_cap_s
        raise_it = (
            f"raise max_runtime_s (this server's cap: {cap:g} s)"
            if cap is not None
            else "raise max_runtime_s"
        )
        return (
            f"the job exceeded its time limit of {limit_s:g} s and was stopped; "
            f"{raise_it} or reduce n_clusters or n_samples (the limit applies to each "
            "attempt; a job that timed out is not retried)"
        )


# ---- processes ---------------------------------------------------------------------------


def _settings_payload(settings: Settings) -> dict[str, Any]:
    """Settings as plain data for a spawned child (REDIS_URL under its environment name)."""
    payload = settings.model_dump(mode="json")
    payload["REDIS_URL"] = payload.pop("redis_url")
    return payload


def _load_settings(source: Settings | Mapping[str, Any] | None) -> Settings:
    if isinstance(source, Settings):
        return source
    if source is None:
        return Settings()
    data = dict(source)
    if "redis_url" in data:
        data["REDIS_URL"] = data.pop("redis_url")
    return Settings(**data)


def _stop_when_orphaned(parent_pid: int, stop: threading.Event, every_s: float = 1.0) -> None:
    """Set ``stop`` once the parent is gone (a spawned worker must not outlive its server)."""

    def watch() -> None:
        while not stop.wait(every_s):
            if os.getppid() != parent_pid:
                log.warning("parent process %d is gone; worker stopping", parent_pid)
                stop.set()

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def run_worker_process(
    settings: Settings | Mapping[str, Any] | None = None,
    index: int = 0,
    *,
    estimator: Callable[..., Any] | None = None,
    stop: threading.Event | None = None,
    parent_pid: int | None = None,
    threads: int | None = None,
) -> None:
    """Entry point of a worker process (``rbfkm worker``): settings from the argument or env.

    Builds its own Redis client, queue, result store and dataset loader, and runs until
    SIGTERM or SIGINT (a running job stops at its next iteration and is handed back), or
    until ``parent_pid`` (set by :func:`spawn_workers`) is no longer its parent.
    ``threads``: the CPU threads of its fits (set by :func:`spawn_workers`; None: this
    worker's share of the cores, see :mod:`service.threads`), set before any fit.
    """
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    config = _load_settings(settings)
    if not config.redis_url:
        raise ValueError("a worker process needs REDIS_URL (the server it shares with the API)")
    if threads is None:
        sharing = threads_module.fitting_at_once(config.workers, config.device)
        threads = threads_module.worker_threads(config.threads_per_worker, sharing, index)
    counts = threads_module.apply_threads(threads)
    log.info(
        "worker %d (pid %d) fits on %d CPU threads (%d inter-op)",
        index,
        os.getpid(),
        counts.intra_op,
        counts.inter_op,
    )
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
    if parent_pid is not None:
        _stop_when_orphaned(parent_pid, stop)
    client = redis.Redis.from_url(config.redis_url, health_check_interval=30)
    try:
        queue = JobQueue.from_settings(client, config)
        start_sender(queue, config, stop)  # this process also sends due webhooks
        results = ResultStore(config.data_dir)
        worker = Worker(
            queue,
            results,
            dataset_loader(config.data_dir),
            device=device_for_index(config.device, index),
            estimator=estimator,
            max_runtime_s=config.max_runtime_s,
            max_runtime_cap_s=config.max_runtime_cap_s,
            load_weights=functools.partial(dataset_weights, config.data_dir),
            worker_procs=config.worker_procs,
            write_output=OutputWriter(results, config),
        )
        worker.run(stop)
    finally:
        client.close()


def spawn_workers(
    settings: Settings,
    n: int,
    *,
    estimator: Callable[..., Any] | None = None,
    daemon: bool = True,
    first_index: int = 0,
    workers: int | None = None,
) -> list[BaseProcess]:
    """Start ``n`` worker processes with the ``spawn`` method (CUDA-safe); returns them.

    ``first_index``: the index of the first (it picks the device under ``auto``, see
    :func:`service.devices.device_for_index`); a replacement takes the index of the worker
    it replaces. ``workers``: how many worker processes share this machine's cores (default
    ``n``); each is started with its share in the thread variables of its environment, so
    its native pools start at that size (see :mod:`service.threads`).
    """
    context = multiprocessing.get_context("spawn")
    payload = _settings_payload(settings)
    sharing = threads_module.fitting_at_once(workers or n, settings.device)
    cores = threads_module.usable_cores()
    processes = []
    for index in range(first_index, first_index + n):
        threads = threads_module.worker_threads(settings.threads_per_worker, sharing, index, cores)
        process = context.Process(
            target=run_worker_process,
            args=(payload, index),
            kwargs={"estimator": estimator, "parent_pid": os.getpid(), "threads": threads},
            name=f"rbfkm-worker-{index}",
            daemon=daemon,
        )
        with threads_module.child_environment(threads_module.thread_environment(threads)):
            process.start()
        processes.append(process)
    return processes
