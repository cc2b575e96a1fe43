"""CPU threads of the workers: the cores this process may use, each worker's share, and
setting a worker's thread pools to it.

torch, OpenMP, MKL and OpenBLAS size their pools to every core they see, and they see the
machine's cores, not a container's CPU quota. Workers whose fits run at the same time then
ask together for several times the cores there are: they take turns on them, and whatever
still parallelises op by op (numpy's BLAS, the engine's ops outside its block-parallel
passes) waits at barriers for preempted threads (benchmarks/README.md,
"Oversubscription"). So each worker gets its share of the usable cores
(:func:`usable_cores`): the affinity mask, bounded by the cgroup (v2 or v1) CPU quota.
``RBFKM_THREADS_PER_WORKER`` overrides the share.

The supervisor (:func:`service.worker.spawn_workers`) starts each worker with the thread
variables of the native pools in its environment (:func:`thread_environment`,
:func:`child_environment`), so the pools start at their size; the worker sets torch's own
counts before any fit (:func:`apply_threads`). Everything else here is a pure function of
its arguments, files included, so that it is tested with fake cgroup files.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

#: Where the cgroup file systems are mounted.
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: The cgroups of this process, one line per hierarchy: ``id:controllers:path``.
PROC_CGROUP = Path("/proc/self/cgroup")

#: The variables that size the native thread pools a worker loads (read when they load).
THREAD_ENV_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)

#: v1 mounts that may hold the ``cpu`` controller, alone or joined with ``cpuacct``.
_V1_CPU_MOUNTS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")

#: Held while the environment is changed around a child's start (see child_environment).
_ENVIRON_LOCK = threading.Lock()


def parse_cpu_max(text: str) -> float | None:
    """Cores allowed by a cgroup v2 ``cpu.max`` (``"$QUOTA $PERIOD"``); None when unlimited
    (``"max ..."``) or unreadable."""
    fields = text.split()
    if not fields or fields[0] == "max":
        return None
    period = fields[1] if len(fields) > 1 else "100000"
    return _quota_cores(fields[0], period)


def parse_cfs(quota: str, period: str) -> float | None:
    """Cores allowed by cgroup v1 ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us``; None
    when unlimited (a quota of ``-1``) or unreadable."""
    return _quota_cores(quota.strip(), period.strip())


def _quota_cores(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def _own_paths(proc_cgroup: Path) -> tuple[str | None, str | None]:
    """This process's cgroup path in the v2 hierarchy and in v1's ``cpu`` one (None where
    it has none): ``0::/path`` and ``N:cpu,cpuacct:/path``."""
    v2 = v1 = None
    with contextlib.suppress(OSError):
        for line in proc_cgroup.read_text().splitlines():
            ident, _, rest = line.partition(":")
            controllers, _, path = rest.partition(":")
            if ident == "0" and controllers == "":
                v2 = path
            elif "cpu" in controllers.split(","):
                v1 = path
    return v2, v1


def _up_from(base: Path, path: str | None) -> list[Path]:
    """``base/path`` and each of its parents up to ``base``: a quota set on any ancestor
    bounds the process. Only ``base`` when the path is unknown or not mounted there (inside
    a cgroup namespace the process's own group is the root)."""
    here = base / path.strip("/") if path else base
    if not here.is_dir() or not here.is_relative_to(base):
        return [base]
    chain = [here]
    while chain[-1] != base:
        chain.append(chain[-1].parent)
    return chain


def cgroup_cpu_quota(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """The cores the cgroup CPU quota allows this process (the lowest along its groups, v2
    ``cpu.max`` or v1 ``cpu.cfs_quota_us``/``cpu.cfs_period_us``); None when no quota is
    set or none can be read."""
    v2_path, v1_path = _own_paths(proc_cgroup)
    found: list[float] = []
    for directory in _up_from(root, v2_path):
        with contextlib.suppress(OSError):
            cores = parse_cpu_max((directory / "cpu.max").read_text())
            if cores is not None:
                found.append(cores)
    for mount in _V1_CPU_MOUNTS:
        if not (root / mount).is_dir():
            continue
        for directory in _up_from(root / mount, v1_path):
            with contextlib.suppress(OSError):
                quota = (directory / "cpu.cfs_quota_us").read_text()
                period = (directory / "cpu.cfs_period_us").read_text()
                cores = parse_cfs(quota, period)
                if cores is not None:
                    found.append(cores)
        break
    return min(found) if found else None


def affinity_cores() -> int:
    """The cores this process may run on (its affinity mask; all of them where the system
    has no masks)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def usable_cores(
    affinity: int | None = None, *, root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP
) -> int:
    """The cores a worker's threads may use: the affinity mask (this process's unless
    ``affinity`` is given), bounded by the cgroup CPU quota rounded up (1.5 cores of quota
    keep two threads busy three quarters of the time); at least 1."""
    cores = affinity if affinity is not None else affinity_cores()
    quota = cgroup_cpu_quota(root, proc_cgroup)
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)


def fitting_at_once(workers: int, device: str) -> int:
    """How many of ``workers`` worker processes may run fits at the same time.

    Workers on the CPU take turns through the CPU's device lock (:mod:`service.devices`):
    one fits at a time, with every core. Any other device setting counts every worker:
    GPU workers fit side by side and each needs host threads, and telling whether ``auto``
    means a GPU would take torch into the supervisor's process.
    """
    return 1 if device == "cpu" else max(1, workers)


def share_of_cores(cores: int, workers: int, index: int) -> int:
    """Worker ``index``'s share of ``cores`` split between ``workers``: an equal part, the
    first ``cores % workers`` workers one more (4 cores, 3 workers: 2, 1, 1), and at least
    one thread each (more workers than cores share cores)."""
    workers = max(1, workers)
    base, extra = divmod(cores, workers)
    return max(1, base + (1 if index % workers < extra else 0))


def worker_threads(override: int | None, workers: int, index: int, cores: int | None = None) -> int:
    """The threads of worker ``index`` of ``workers`` fitting at once: ``override``
    (``RBFKM_THREADS_PER_WORKER``) when set, else its share of the usable ``cores``."""
    if override is not None:
        return max(1, override)
    return share_of_cores(cores if cores is not None else usable_cores(), workers, index)


def most_worker_threads(override: int | None) -> int:
    """The most CPU threads a worker on this machine fits on: ``override``
    (``RBFKM_THREADS_PER_WORKER``) when set, else every usable core (a worker alone)."""
    return max(1, override) if override is not None else usable_cores()


def thread_environment(threads: int) -> dict[str, str]:
    """The environment that sizes every native pool of a process to ``threads``."""
    return dict.fromkeys(THREAD_ENV_VARS, str(threads))


@contextlib.contextmanager
def child_environment(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` in this process's environment while the block runs, restored after it.

    ``multiprocessing``'s ``spawn`` gives a child a copy of the parent's environment at
    ``Process.start()`` and takes no environment of its own, so a child's variables are set
    around its start. One start at a time (a lock), so that two supervisors' threads do not
    restore each other's values.
    """
    with _ENVIRON_LOCK:
        saved = {name: os.environ.get(name) for name in env}
        os.environ.update(env)
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


@dataclass(frozen=True)
class Threads:
    """A process's thread counts once set: torch's intra-op pool and its inter-op one."""

    intra_op: int
    inter_op: int


def apply_threads(threads: int) -> Threads:
    """Size this process's pools to ``threads``: torch's intra-op pool (OpenMP and MKL with
    it), its inter-op pool where it has not started yet (it can be set only once, before
    any inter-op work), and the variables of pools loaded later. Call before any fit."""
    import torch

    os.environ.update(thread_environment(threads))
    torch.set_num_threads(threads)
    with contextlib.suppress(RuntimeError):  # already set, or its pool already started
        torch.set_num_interop_threads(threads)
    return Threads(torch.get_num_threads(), torch.get_num_interop_threads())
