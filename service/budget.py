"""What a job costs a worker in memory, checked before the job is queued.

A job that cannot fit a worker would fail on its allocator's message after every attempt;
the API refuses it at once with a 422 that says what to change. The estimate is the
engine's own bound for the fit (:func:`rbfkm_engine.memory.fit_memory`, which imports no
torch) plus what the worker adds around it: the dataset's pages as it reads them and the
result it writes (labels and the soft assignments, dense for ``softmax``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rbfkm_engine.memory import FitMemory, fit_memory
from service.errors import JobTooLarge

#: A worker's budget, unless ``RBFKM_MAX_JOB_BYTES`` sets it: this share of the machine's
#: memory (its cgroup limit where one is set), the rest for the other processes.
DEFAULT_SHARE = 0.5
#: Bytes of one stored nonzero of the soft assignments (a value, an int32 index)
#: and the entmax15 nonzeros per row the bound allows for.
_NONZERO_BYTES = 12
_SPARSE_NONZEROS = 4
_GIB = 1 << 30


@dataclass(frozen=True)
class JobMemory:
    """A job's peak memory on a worker, by what holds it (an upper bound)."""

    fit: FitMemory
    dataset: int  # the stored array's pages, read through a memory map
    result: int  # labels and soft assignments as the worker writes them

    @property
    def total(self) -> int:
        return self.fit.total + self.dataset + self.result


def fitted_clusters(params: Any) -> int:
    """The centres a job's fit holds: ``n_clusters``, or with ``"auto"`` the
    ``max_clusters + 1`` it anneals to."""
    if params["n_clusters"] == "auto":
        return int(params.get("max_clusters", 10)) + 1
    return int(params["n_clusters"])


def job_memory(
    n_samples: int, n_features: int, itemsize: int, params: Any, threads: int = 1
) -> JobMemory:
    """The memory a job with these engine ``params`` (a mapping with ``n_clusters`` and
    ``assignment``) takes on a dataset of this shape and item size, on a worker fitting on
    ``threads`` CPU threads."""
    k, assignment = fitted_clusters(params), str(params.get("assignment", "entmax15"))
    overshoot = float(params.get("overshoot", 1.0))
    per_row = k if assignment == "softmax" else min(k, _SPARSE_NONZEROS)
    fit = fit_memory(
        n_samples, n_features, k, assignment=assignment, threads=threads, overshoot=overshoot
    )
    return JobMemory(
        fit=fit,
        dataset=n_samples * n_features * itemsize,
        result=n_samples * (8 + 8 + per_row * _NONZERO_BYTES),  # labels, indptr, nonzeros
    )


def check_job_memory(meta: dict[str, Any], params: Any, budget: int, threads: int = 1) -> JobMemory:
    """The job's memory on a worker of ``threads`` CPU threads, or
    :class:`~service.errors.JobTooLarge` naming what to change when it is over the worker
    ``budget`` (bytes)."""
    itemsize = 8 if meta.get("dtype") == "float64" else 4
    n, d = int(meta["n_samples"]), int(meta["n_features"])
    need = job_memory(n, d, itemsize, params, threads)
    if need.total > budget:
        raise JobTooLarge(
            f"this job needs about {need.total / _GIB:.3g} GiB on a worker (n_samples={n}, "
            f"n_features={d}, n_clusters={params['n_clusters']}), over the worker budget of "
            f"{budget / _GIB:.3g} GiB (RBFKM_MAX_JOB_BYTES); {_advice(need, params)}"
        )
    return need


def _advice(need: JobMemory, params: Any) -> str:
    """What to change, by the largest term."""
    fit = need.fit
    if params.get("assignment") == "softmax" and need.result >= fit.total:
        return "use assignment 'entmax15' (sparse soft assignments) or 'hard'"
    if fit.centres >= max(fit.data, fit.blocks):
        return "ask for fewer clusters"
    return "fit a sample of the rows, or fewer features"


def machine_memory_bytes(cgroup: Path = Path("/sys/fs/cgroup/memory.max")) -> int:
    """This machine's memory: physical memory, or the cgroup (v2) limit when lower."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = cgroup.read_text().strip()
    except OSError:
        return physical
    return min(physical, int(limit)) if limit.isdigit() else physical


def default_max_job_bytes() -> int:
    """``RBFKM_MAX_JOB_BYTES``'s default: ``DEFAULT_SHARE`` of this machine's memory."""
    return int(DEFAULT_SHARE * machine_memory_bytes())
