"""Keeps the processes of `rbfkm serve` running: its workers and its embedded Redis.

A worker killed mid-job (the OOM killer, `kill -9`, a crash in a native library) leaves
its job pending in the stream, and a live worker takes it over once its lease lapses (see
:mod:`service.queue`). With one worker per machine, the embedded default, there is no
other one: :class:`WorkerSupervisor` starts a replacement in the dead worker's slot (the
same index, so the same device); `rbfkm worker --workers N` uses it too.

The embedded redis-server of `rbfkm serve` is watched the same way
(:class:`RedisSupervisor`): when it dies it is reaped and started again on the same port
and data directory, so its AOF replays (queued jobs, job states and datasets' metadata come
back) and the API's and workers' clients, which reconnect on their next command, find it
where it was.

Both share :class:`Supervisor` and its :class:`Backoff`: a process that had run a while is
restarted at once; one that dies again soon after it started waits longer each time
(doubling up to ``max_backoff_s``), so a process that cannot start does not spin.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any, TypeVar

from service.settings import Settings
from service.worker import spawn_workers

if TYPE_CHECKING:
    from service.embedded import EmbeddedRedis

log = logging.getLogger(__name__)

_S = TypeVar("_S", bound="Supervisor")

#: Seconds a process must have run for its death to reset its slot's back-off.
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


class Backoff:
    """When to restart the process of one slot after it exited.

    A process that ran at least ``stable_after_s`` is restarted at once and the delay goes
    back to ``first_s``; one that died sooner waits the delay, which then doubles, up to
    ``max_s``. Times are passed in (``time.monotonic()``), so the rule is tested alone.
    """

    def __init__(
        self, first_s: float, max_s: float, *, stable_after_s: float = _STABLE_AFTER_S
    ) -> None:
        if first_s <= 0 or max_s < first_s:
            raise ValueError("need 0 < first_s <= max_s")
        self.first_s = first_s
        self.max_s = max_s
        self.stable_after_s = stable_after_s
        self.delay_s = first_s
        self.started_at = 0.0
        self.retry_at: float | None = None  # set while a restart is pending

    def started(self, now: float) -> None:
        """The slot's process (re)started at ``now``."""
        self.started_at = now
        self.retry_at = None

    def exited(self, now: float) -> float:
        """The process was seen dead at ``now``: the seconds to wait before restarting it."""
        if now - self.started_at >= self.stable_after_s:
            self.delay_s = self.first_s
            wait = 0.0
        else:
            wait = self.delay_s
            self.delay_s = min(2.0 * self.delay_s, self.max_s)
        self.retry_at = now + wait
        return wait

    @property
    def pending(self) -> bool:
        """Whether a death was seen and its restart has not happened yet."""
        return self.retry_at is not None

    def due(self, now: float) -> bool:
        """Whether the pending restart may happen at ``now``."""
        return self.retry_at is not None and now >= self.retry_at


class Supervisor:
    """``n`` slots, each holding one process that is restarted when it exits while the
    supervisor runs, with a :class:`Backoff` per slot.

    ``start`` launches the processes and a watcher thread; ``stop`` ends the watching first
    (so that processes being stopped are not restarted), then stops the processes.
    Subclasses say how to launch, inspect and stop their processes.
    """

    #: What the log line says happens next, after "... exited ... after N s; ".
    replacing = "restarting it"

    def __init__(
        self, n: int, *, poll_s: float = 0.5, backoff_s: float = 1.0, max_backoff_s: float = 30.0
    ) -> None:
        if n < 0 or poll_s <= 0:
            raise ValueError("need n >= 0 and poll_s > 0")
        self.n, self.poll_s, self.restarts = n, poll_s, 0
        self._backoff = [Backoff(backoff_s, max_backoff_s) for _ in range(n)]  # checks them
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- what subclasses provide ---------------------------------------------------------

    def _launch_all(self) -> None:
        """Start every slot's first process (errors propagate: the service does not start)."""
        raise NotImplementedError

    def _launch(self, index: int) -> None:
        """Start a new process in slot ``index``."""
        raise NotImplementedError

    def _ended(self, index: int) -> str | None:
        """How the process of slot ``index`` ended (reaping it), or None while it runs."""
        raise NotImplementedError

    def _shutdown(self) -> None:
        """Stop every process (the watcher has stopped)."""
        raise NotImplementedError

    # ---- the watching --------------------------------------------------------------------

    def start(self: _S) -> _S:
        self._launch_all()
        now = time.monotonic()
        for backoff in self._backoff:
            backoff.started(now)
        name = type(self).__name__
        self._thread = threading.Thread(target=self._watch, name=name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._shutdown()

    def __enter__(self: _S) -> _S:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            for index in range(self.n):
                self._check(index)

    def _check(self, index: int) -> None:
        """Restart the process of slot ``index`` if it has exited and its back-off is over."""
        backoff = self._backoff[index]
        if not backoff.pending:
            ended = self._ended(index)
            if ended is None:
                return
            now = time.monotonic()
            lived = now - backoff.started_at
            wait = backoff.exited(now)
            log.warning(
                "%s after %.1f s; %s%s",
                ended,
                lived,
                self.replacing,
                f" in {wait:.0f} s" if wait else "",
            )
        if not backoff.due(time.monotonic()) or self._stop.is_set():
            return
        try:
            self._launch(index)
        except Exception as exc:  # a start that fails is a death at once: back off
            now = time.monotonic()
            backoff.started(now)
            wait = backoff.exited(now)
            log.warning("the restart failed: %s; %s in %.0f s", exc, self.replacing, wait)
            return
        self.restarts += 1
        backoff.started(time.monotonic())


class WorkerSupervisor(Supervisor):
    """``n`` worker processes, each replaced (in its slot: same index, same device) when it
    exits while the supervisor runs. The ``n`` split the machine's cores between them (a
    replacement gets its slot's share; see :mod:`service.threads`)."""

    replacing = "starting a replacement"

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
        super().__init__(n, poll_s=poll_s, backoff_s=backoff_s, max_backoff_s=max_backoff_s)
        self.settings = settings
        self.estimator = estimator
        self._processes: list[BaseProcess] = []
        self._lock = threading.Lock()

    @property
    def processes(self) -> list[BaseProcess]:
        """The current worker processes, one per slot."""
        with self._lock:
            return list(self._processes)

    def _launch_all(self) -> None:
        self._processes = spawn_workers(
            self.settings, self.n, estimator=self.estimator, workers=self.n
        )

    def _launch(self, index: int) -> None:
        (replacement,) = spawn_workers(
            self.settings, 1, estimator=self.estimator, first_index=index, workers=self.n
        )
        with self._lock:
            self._processes[index] = replacement

    def _ended(self, index: int) -> str | None:
        process = self._processes[index]
        if process.is_alive():
            return None
        return f"worker {index} (pid {process.pid}) exited with code {process.exitcode}"

    def _shutdown(self) -> None:
        stop_processes(self.processes)


class RedisSupervisor(Supervisor):
    """The embedded redis-server of `rbfkm serve`, restarted on the same port and data
    directory when it dies (its AOF replays), stopped last."""

    replacing = "restarting it on the same port (its AOF replays)"

    def __init__(
        self,
        server: EmbeddedRedis,
        *,
        poll_s: float = 0.5,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        start_timeout_s: float = 60.0,
    ) -> None:
        super().__init__(1, poll_s=poll_s, backoff_s=backoff_s, max_backoff_s=max_backoff_s)
        self.server = server
        self.start_timeout_s = start_timeout_s

    def _launch_all(self) -> None:
        self.server.start()

    def _launch(self, index: int) -> None:
        started = time.monotonic()
        url = self.server.start(timeout_s=self.start_timeout_s)
        pid = self.server.process.pid if self.server.process else None
        log.warning(
            "embedded Redis back on %s (pid %s, loaded in %.1f s)",
            url,
            pid,
            time.monotonic() - started,
        )

    def _ended(self, index: int) -> str | None:
        process = self.server.process
        if process is None:  # stopped by someone else: start it again
            return "the embedded redis-server is not running"
        code = process.poll()  # reaps it
        if code is None:
            return None
        return f"the embedded redis-server (pid {process.pid}) exited with code {code}"

    def _shutdown(self) -> None:
        self.server.stop()
