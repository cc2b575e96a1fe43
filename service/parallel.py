"""One job's fit across several processes of one worker: a job's ``"parallel"``.

A job that asks for ``"parallel": N`` (or ``"all"``) is fitted data-parallel by ``N``
rank processes of the worker that claimed it, on ``torch.distributed`` (the engine's
:mod:`~rbfkm_engine.reducer`): gloo on the CPU, NCCL with one GPU a rank on CUDA. What a
worker offers (:func:`capacity`) is ``RBFKM_WORKER_PROCS`` processes on the CPU, the GPUs
of its machine on CUDA; a job asking for more runs on what the worker offers (the API
cannot know which worker claims a job), and the result's ``processes`` says how many ran.

The worker stays what it is for any job (lease, cancel, time limit, progress writes, the
result); it starts the ranks (:class:`RankGroup`) as plain child processes
(``python -m service.parallel``: a worker spawned as a daemon may not start
``multiprocessing`` children) that meet in a ``FileStore`` in a directory of the attempt
(:data:`STORE`). Rank ``r`` memory-maps the dataset and fits its contiguous run of rows
(:func:`row_bounds`); rank 0 writes the fit's progress to a file the worker polls; every
rank writes its labels, rank 0 the fitted model, and the worker joins them in rank order
(:meth:`RankGroup.result`) and saves the result as for any job.

Stopping is the worker's: on cancel, time limit or shutdown it kills the ranks (a fit that
is stopped keeps nothing, as ``FitInterrupted``). A rank that dies (killed, out of memory)
or fails makes the worker kill the others at once and fail the attempt as a crash:
retried whole, never lost; a rank whose worker is gone exits, and the group's timeout
(:func:`group_timeout_s`) ends any collective still waiting, so nothing hangs. A rank that
fails on bad input (``ValueError``...) fails the job without retries, as for any job.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from rbfkm_engine.device import cuda_count
from service.errors import NON_RETRYABLE
from service.params import default_estimator
from service.threads import thread_environment

#: What a job sets to use every process its worker offers.
ALL = "all"
#: The most processes a job may ask for.
MAX_PARALLEL = 1024
#: The file of the attempt directory the ranks meet in (a torch.distributed FileStore).
STORE = "store"
#: Seconds a collective waits for the other ranks when the job has no time limit.
DEFAULT_TIMEOUT_S = 3600.0
#: Seconds the worker waits for a killed rank to be gone.
KILL_WAIT_S = 10.0


class RankFailed(RuntimeError):
    """A rank of a parallel fit died or failed: the attempt crashed (retried whole)."""


def capacity(device: str, worker_procs: int) -> int:
    """Processes a job on ``device`` may be fitted by: the GPUs of this machine on CUDA,
    ``worker_procs`` (``RBFKM_WORKER_PROCS``) on the CPU."""
    if device.startswith("cuda"):
        return max(1, cuda_count())
    return max(1, worker_procs)


def world_size(requested: Any, available: int) -> int:
    """The ranks of a job that asks for ``requested`` (``None``: 1) from a worker that
    offers ``available``: at most what it offers. A stored value the API would refuse (a
    job written by hand) is a ``ValueError``: bad input, never retried."""
    if requested is None:
        return 1
    if requested == ALL:
        return available
    if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
        raise ValueError(
            f'invalid job parameters: parallel must be an integer >= 1 or "all"; got {requested!r}'
        )
    return min(requested, available)


def rank_devices(device: str, world: int) -> list[str]:
    """The device of each rank: the CPU for all, or on CUDA the worker's own GPU for rank
    0 and the next ones (in index order, wrapping round) for the others."""
    if not device.startswith("cuda"):
        return ["cpu"] * world
    count = max(1, cuda_count())
    own = int(device.partition(":")[2] or 0)
    return [f"cuda:{(own + rank) % count}" for rank in range(world)]


def row_bounds(n: int, world: int) -> list[int]:
    """Where each rank's contiguous run of ``n`` rows starts, and the end: ``world + 1``
    indices, the runs as even as can be."""
    return [rank * n // world for rank in range(world + 1)]


def group_timeout_s(limit_s: float | None) -> float:
    """How long a collective may wait for a slow rank: the attempt's time limit (no wait
    within an attempt is longer), else :data:`DEFAULT_TIMEOUT_S`."""
    return DEFAULT_TIMEOUT_S if limit_s is None else max(limit_s, 1.0)


@dataclass(frozen=True)
class RankJob:
    """What every rank of one attempt is given (pickled into the attempt directory).

    ``estimator`` builds the model from the job's engine parameters and ``device``
    (``None``: ``RBFKMeans``); it, ``load_dataset`` and ``load_weights`` must be
    importable (module-level callables or ``functools.partial`` of them).
    """

    dataset_id: str
    params: dict[str, Any]
    devices: list[str]
    load_dataset: Callable[[str], np.ndarray]
    load_weights: Callable[[str], np.ndarray | None] | None = None
    estimator: Callable[..., Any] | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    threads: int = 1
    progress_interval_s: float = 0.2
    parent_pid: int = field(default_factory=os.getpid)

    @property
    def world(self) -> int:
        return len(self.devices)


# ---- the worker's side -----------------------------------------------------------------


class RankGroup:
    """The rank processes of one attempt, started in ``directory`` (empty, the attempt's
    own), and what they leave there."""

    def __init__(self, job: RankJob, directory: Path) -> None:
        self.job = job
        self.directory = Path(directory)
        self.processes: list[subprocess.Popen] = []
        self._progress_stamp: int | None = None

    def start(self) -> None:
        """Start every rank (a child of this process, with this process's import path)."""
        (self.directory / "job.pkl").write_bytes(pickle.dumps(self.job))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        env.update(thread_environment(self.job.threads))
        for rank in range(self.job.world):
            command = [sys.executable, "-m", "service.parallel", str(self.directory), str(rank)]
            self.processes.append(subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL))

    @property
    def pids(self) -> list[int]:
        """The ranks' process ids, in rank order."""
        return [process.pid for process in self.processes]

    def finished(self) -> bool:
        """Whether every rank ended well; :class:`RankFailed` (or ``ValueError`` for bad
        input) as soon as one ended otherwise."""
        codes = [process.poll() for process in self.processes]
        failed = [(rank, code) for rank, code in enumerate(codes) if code not in (None, 0)]
        if failed:
            self.kill()
            raise self._failure(failed)
        return all(code == 0 for code in codes)

    def _failure(self, failed: list[tuple[int, int]]) -> Exception:
        """The error of an attempt whose ranks ``failed`` (rank, exit status): a rank's bad
        input if one reported it, else a crash naming the rank that caused it (one that
        died without a word, before those whose collectives failed with it)."""
        errors = [
            _read_json(self.directory / f"error-{rank}.json") for rank in range(self.job.world)
        ]
        for error in errors:
            if error is not None and error["bad_input"]:
                return ValueError(error["message"])
        rank, code = next(((r, c) for r, c in failed if errors[r] is None), failed[0])
        error = errors[rank]
        why = f"failed: {error['message']}" if error else _exit_text(code)
        world = self.job.world
        return RankFailed(f"rank {rank} of the {world} processes of this parallel fit {why}")

    def progress(self) -> dict[str, Any] | None:
        """Rank 0's latest progress when it is new since the last call, else ``None``."""
        path = self.directory / "progress.json"
        try:
            stamp = path.stat().st_mtime_ns
        except FileNotFoundError:
            return None
        if stamp == self._progress_stamp:
            return None
        self._progress_stamp = stamp
        return _read_json(path)

    def kill(self) -> None:
        """End every rank still running, and wait for them."""
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGKILL)
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(KILL_WAIT_S)

    def result(self) -> Any:
        """Rank 0's fitted model with every rank's labels, in rank order."""
        model = pickle.loads((self.directory / "model.pkl").read_bytes())
        parts = [np.load(self.directory / f"labels-{r}.npy") for r in range(self.job.world)]
        model.labels_ = np.concatenate(parts)
        return model


def _exit_text(code: int) -> str:
    """How a rank ended, in words."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


def _read_json(path: Path) -> dict[str, Any] | None:
    """A JSON file a rank wrote (atomically), ``None`` when there is none."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def attempt_prefix(job_id: str) -> str:
    """The name every attempt directory of the job ``job_id`` starts with."""
    return f"rbfkm-{job_id}-"


def remove_leftovers(job_id: str, root: Path | None = None) -> int:
    """Remove the attempt directories an earlier attempt of the job left under ``root``
    (the temporary directory): a worker killed with its ranks cannot clean up, and the job
    runs again only once that attempt's lease has expired. Returns how many were removed."""
    root = Path(tempfile.gettempdir()) if root is None else root
    removed = 0
    for directory in root.glob(attempt_prefix(job_id) + "*"):
        if directory.is_dir():
            shutil.rmtree(directory, ignore_errors=True)
            removed += 1
    return removed


def fit_parallel(
    job: RankJob,
    directory: Path,
    *,
    should_stop: Callable[[], bool],
    report: Callable[[dict[str, Any]], Any],
    poll_s: float,
    started: Callable[[RankGroup], Any] | None = None,
) -> Any | None:
    """Run ``job`` on its ranks to its end: the fitted model (labels of every row), or
    ``None`` when ``should_stop`` said stop (the ranks are killed: nothing to keep).

    ``report`` gets rank 0's progress (a mapping of ``FitProgress``'s fields) as it comes;
    ``started``, the group once its ranks run. A rank that dies or fails raises
    :class:`RankFailed` (``ValueError`` for bad input) once the others are killed.
    """
    group = RankGroup(job, directory)
    try:
        group.start()
        if started is not None:
            started(group)
        while True:
            if should_stop():
                return None
            done = group.finished()
            progress = group.progress()
            if progress is not None:
                report(progress)
            if done:
                return group.result()
            time.sleep(poll_s)
    finally:
        group.kill()


# ---- a rank's side ---------------------------------------------------------------------


def _exit_when_orphaned(parent_pid: int, every_s: float = 1.0) -> None:
    """Exit this rank once its worker is gone (a rank must not outlive it)."""

    def watch() -> None:
        while True:
            time.sleep(every_s)
            if os.getppid() != parent_pid:
                os._exit(3)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _publish(path: Path, write: Callable[[BinaryIO], Any]) -> None:
    """``write`` to ``path`` under a temporary name, then renamed: never half a file."""
    partial = path.with_name(path.name + ".partial")
    with partial.open("wb") as handle:
        write(handle)
    partial.replace(path)


def _write_json(path: Path, value: dict[str, Any]) -> None:
    _publish(path, lambda handle: handle.write(json.dumps(value).encode()))


def _progress_writer(directory: Path, interval_s: float) -> Callable[[Any], bool]:
    """Rank 0's callback: the progress to the attempt directory, at most every
    ``interval_s``; never stops the fit (the worker kills the ranks to stop one)."""
    last = -float("inf")

    def write(progress: Any) -> bool:
        nonlocal last
        now = time.monotonic()
        if now - last >= interval_s:
            last = now
            fields = ("fraction", "sigma", "iteration", "objective")
            _write_json(directory / "progress.json", {f: getattr(progress, f) for f in fields})
        return False

    return write


def _fit_shard(job: RankJob, rank: int, directory: Path) -> None:
    """This rank's part of the fit: its rows of the dataset, its labels to the directory
    (and, on rank 0, the fitted model and a last progress record)."""
    estimator = job.estimator or default_estimator()
    X = job.load_dataset(job.dataset_id)
    weights = None if job.load_weights is None else job.load_weights(job.dataset_id)
    bounds = row_bounds(X.shape[0], job.world)
    rows = slice(bounds[rank], bounds[rank + 1])
    model = estimator(**job.params, device=job.devices[rank])
    callback = _progress_writer(directory, job.progress_interval_s) if rank == 0 else None
    model.fit(X[rows], sample_weight=None if weights is None else weights[rows], callback=callback)
    _publish(directory / f"labels-{rank}.npy", lambda handle: np.save(handle, model.labels_))
    if rank == 0:
        _publish(directory / "model.pkl", lambda handle: pickle.dump(model, handle))


def rank_main(directory: Path, rank: int) -> int:
    """One rank: join the group, fit its shard; on failure, the error to
    ``error-{rank}.json`` and a non-zero status."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    job: RankJob = pickle.loads((directory / "job.pkl").read_bytes())
    _exit_when_orphaned(job.parent_pid)
    torch.set_num_threads(job.threads)
    device = job.devices[rank]
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    try:
        dist.init_process_group(
            "nccl" if device.startswith("cuda") else "gloo",
            init_method=f"file://{directory / STORE}",
            rank=rank,
            world_size=job.world,
            timeout=timedelta(seconds=job.timeout_s),
        )
        try:
            _fit_shard(job, rank, directory)
        finally:
            dist.destroy_process_group()
    except Exception as failed:
        bad_input = isinstance(failed, NON_RETRYABLE)
        if not bad_input:  # the worker's log has the trace (the rank's output is the worker's)
            traceback.print_exc()
        message = str(failed) or type(failed).__name__
        if not bad_input:
            message = f"{type(failed).__name__}: {message}"
        _write_json(directory / f"error-{rank}.json", {"message": message, "bad_input": bad_input})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(rank_main(Path(sys.argv[1]), int(sys.argv[2])))
