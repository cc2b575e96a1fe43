"""A job's memory on a worker: the engine's bound plus the worker's own, checked before the
job is queued."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.budget import (
    check_job_memory,
    default_max_job_bytes,
    job_memory,
    machine_memory_bytes,
)
from service.errors import JobTooLarge

GIB = 1 << 30


def meta(n: int, d: int, dtype: str = "float32") -> dict[str, object]:
    return {"n_samples": n, "n_features": d, "dtype": dtype}


def test_softmax_results_are_dense_and_entmax15_results_sparse() -> None:
    soft = job_memory(100_000, 16, 4, {"n_clusters": 1000, "assignment": "softmax"})
    sparse = job_memory(100_000, 16, 4, {"n_clusters": 1000, "assignment": "entmax15"})
    assert soft.result > 100 * sparse.result
    assert soft.total > sparse.total


def test_a_job_within_the_budget_passes_and_says_what_it_takes() -> None:
    need = check_job_memory(meta(10_000, 8), {"n_clusters": 10}, budget=GIB)
    assert 0 < need.total < GIB
    assert need.dataset == 10_000 * 8 * 4


@pytest.mark.parametrize(
    ("shape", "params", "advice"),
    [
        ((400_000, 2048), {"n_clusters": 200_000, "assignment": "entmax15"}, "fewer clusters"),
        ((2_000_000, 8), {"n_clusters": 4000, "assignment": "softmax"}, "entmax15"),
        ((20_000_000, 512), {"n_clusters": 8, "assignment": "hard"}, "sample of the rows"),
    ],
)
def test_an_oversized_job_is_refused_saying_what_to_change(
    shape: tuple[int, int], params: dict[str, object], advice: str
) -> None:
    with pytest.raises(JobTooLarge, match=advice) as refused:
        check_job_memory(meta(*shape), params, budget=4 * GIB)
    assert "RBFKM_MAX_JOB_BYTES" in str(refused.value)
    assert refused.value.field == "body.n_clusters"


def test_annealing_past_k_counts_in_the_job_memory() -> None:
    plain = job_memory(100_000, 8, 4, {"n_clusters": 256})
    past = job_memory(100_000, 8, 4, {"n_clusters": 256, "overshoot": 2.0})
    assert past.fit.total > plain.fit.total
    assert past.dataset == plain.dataset and past.result == plain.result


def test_float64_datasets_count_eight_bytes_a_value() -> None:
    params = {"n_clusters": 4}
    wide = check_job_memory(meta(1000, 10, "float64"), params, budget=GIB)
    narrow = check_job_memory(meta(1000, 10, "float32"), params, budget=GIB)
    assert wide.dataset == 2 * narrow.dataset


def test_the_machine_memory_respects_a_cgroup_limit(tmp_path: Path) -> None:
    physical = machine_memory_bytes(tmp_path / "absent")
    assert physical > 0
    limit = tmp_path / "memory.max"
    limit.write_text(f"{physical // 4}\n")
    assert machine_memory_bytes(limit) == physical // 4
    limit.write_text("max\n")
    assert machine_memory_bytes(limit) == physical
    assert 0 < default_max_job_bytes() <= machine_memory_bytes()
