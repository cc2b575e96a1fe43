"""Keeps the worker processes of `rbfkm serve` and `rbfkm worker --workers N` running.

A worker killed mid-job (the OOM killer, `kill -9`, a crash in a native library) leaves
its job pending in the stream, and a live worker takes it over once its lease lapses (see
:mod:`service.queue`). With one worker per machine, the embedded default, there is no
other one: the supervisor starts a replacement in the dead worker's slot (the same index,
so the same device). A replacement that dies again soon after it started waits longer each
time (doubling up to ``max_backoff_s``), so a worker that cannot start does not spin.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.process import BaseProcess
from typing import Any

from service.settings import Settings
from service.worker import spawn_workers

log = logging.getLogger(__name__)

#: Seconds a worker must have run for its death to reset its slot's back-off.
_STABLE_AFTER_S = 10.0
#: Seconds ``stop`` gives the workers to finish or hand back their job before killing them.
STOP_GRACE_S = 15.0


def stop_processes(processes: Sequence[BaseProcess], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the workers (they finish or hand back their job), then kill stragglers."""
    for proc in processes:
        if proc.is_alive():
            proc.terminate()
    for proc in processes:
        proc.join(grace_s)
        if proc.is_alive():
            proc.kill()
            proc.join()


class WorkerSupervisor:
    """``n`` worker processes, each replaced when it exits while the supervisor runs.

    ``start`` spawns them and a watcher thread; ``stop`` ends the watching first (so that
    workers being stopped are not replaced), then stops the workers.
    """

    def __init__(
        self,
        settings: Settings,
        n: int,
        *,
        estimator: Callable[..., Any] | None = None,
        poll_s: float = 0.5,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
    ) -> None:
        if n < 0 or poll_s <= 0 or backoff_s <= 0 or max_backoff_s < backoff_s:
            raise ValueError("need n >= 0, poll_s > 0 and 0 < backoff_s <= max_backoff_s")
        self.settings = settings
        self.n = n
        self.estimator = estimator
        self.poll_s = poll_s
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.restarts = 0
        self._processes: list[BaseProcess] = []
        self._started_at: list[float] = []
        self._delay: list[float] = []
        self._retry_at: list[float | None] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def processes(self) -> list[BaseProcess]:
        """The current worker processes, one per slot."""
        with self._lock:
            return list(self._processes)

    def start(self) -> WorkerSupervisor:
        self._processes = spawn_workers(self.settings, self.n, estimator=self.estimator)
        now = time.monotonic()
        self._started_at = [now] * self.n
        self._delay = [self.backoff_s] * self.n
        self._retry_at = [None] * self.n
        self._thread = threading.Thread(target=self._watch, name="worker-supervisor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        stop_processes(self.processes)

    def __enter__(self) -> WorkerSupervisor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            for index in range(self.n):
                self._check(index)

    def _check(self, index: int) -> None:
        """Replace the worker of slot ``index`` if it has exited and its back-off is over."""
        process = self._processes[index]
        if process.is_alive():
            return
        now = time.monotonic()
        if self._retry_at[index] is None:
            lived = now - self._started_at[index]
            if lived >= _STABLE_AFTER_S:
                self._delay[index] = self.backoff_s
            wait = 0.0 if lived >= _STABLE_AFTER_S else self._delay[index]
            log.warning(
                "worker %d (pid %s) exited with code %s after %.1f s; starting a replacement%s",
                index,
                process.pid,
                process.exitcode,
                lived,
                f" in {wait:.0f} s" if wait else "",
            )
            self._retry_at[index] = now + wait
            if wait:
                self._delay[index] = min(2.0 * self._delay[index], self.max_backoff_s)
        if now < self._retry_at[index] or self._stop.is_set():
            return
        (replacement,) = spawn_workers(
            self.settings, 1, estimator=self.estimator, first_index=index
        )
        with self._lock:
            self._processes[index] = replacement
        self._started_at[index] = time.monotonic()
        self._retry_at[index] = None
        self.restarts += 1
