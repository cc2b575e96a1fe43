"""The block pool: blocks in order, errors raised, block sizes; passes and fits whose
blocks run on several threads give exactly the answers of one thread; a fit's own torch
ops run on one thread, and the caller's thread count is back after it."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from rbfkm_engine import RBFKMeans
from rbfkm_engine.blocks import iter_chunks
from rbfkm_engine.parallel import MIN_ROWS_PER_THREAD, BlockPool
from rbfkm_engine.passes import Workspace

from .conftest import blob_tensor

BLOBS = [[-5.0, 0.0, 0.0], [5.0, 0.0, 1.0], [0.0, 6.0, -1.0], [0.0, -6.0, 0.0], [3.0, 3.0, 3.0]]


def test_map_keeps_the_block_order_and_uses_the_threads() -> None:
    seen: set[int] = set()
    barrier = threading.Barrier(2, timeout=10)

    def fn(rows: slice) -> int:
        seen.add(threading.get_ident())
        if rows.start < 2:
            barrier.wait()  # the first two blocks must run at the same time
        return rows.start

    blocks = [slice(i, i + 1) for i in range(6)]
    with BlockPool(2) as pool:
        assert list(pool.map(fn, blocks)) == list(range(6))
    # Two threads: the caller's own and one worker.
    assert len(seen) == 2 and threading.get_ident() in seen


def test_the_caller_runs_a_block_no_worker_has_started() -> None:
    started, release = threading.Event(), threading.Event()
    ran: dict[int, int] = {}

    def fn(rows: slice) -> int:
        ran[rows.start] = threading.get_ident()
        if rows.start == 0:  # the worker's first block, held until block 3 has run
            started.set()
            assert release.wait(timeout=10)
        if rows.start == 3:
            assert started.wait(timeout=10)
            release.set()
        return rows.start

    with BlockPool(2) as pool:
        assert list(pool.map(fn, [slice(i, i + 1) for i in range(4)])) == [0, 1, 2, 3]
    # Block 3, the latest pending, ran on the caller's thread while block 0 ran elsewhere.
    assert ran[3] == threading.get_ident() != ran[0]


def test_an_error_in_a_block_is_raised_by_map() -> None:
    def fn(rows: slice) -> int:
        if rows.start == 3:
            raise KeyError("block 3")
        return rows.start

    with BlockPool(2) as pool, pytest.raises(KeyError, match="block 3"):
        list(pool.map(fn, [slice(i, i + 1) for i in range(6)]))


def test_one_thread_runs_inline() -> None:
    with BlockPool(1) as pool:
        assert (
            list(pool.map(lambda rows: threading.get_ident(), [slice(0, 1), slice(1, 2)]))
            == [threading.get_ident()] * 2
        )


@pytest.mark.parametrize(
    ("threads", "n", "chunk", "rows"),
    [
        (1, 100_000, 65_536, 65_536),  # one thread: the chunk as given
        (2, 100_000, 65_536, 50_000),  # a block per thread
        (4, 10_000, 65_536, MIN_ROWS_PER_THREAD),  # not below the minimum
        (2, 100_000, 1_000, 1_000),  # never above the chunk
    ],
)
def test_block_rows(threads: int, n: int, chunk: int, rows: int) -> None:
    with BlockPool(threads) as pool:
        assert pool.block_rows(n, chunk) == rows


def test_the_callers_thread_count_is_single_inside_and_restored_after() -> None:
    before = torch.get_num_threads()
    with BlockPool(2):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("assignment", ("hard", "softmax", "entmax15"))
def test_passes_on_two_threads_equal_one_thread(assignment: str) -> None:
    X = blob_tensor(BLOBS, n_per=200, spread=1.5, seed=3)
    w = torch.rand(X.shape[0], generator=torch.Generator().manual_seed(1), dtype=X.dtype)
    C = X[:5].clone()
    outputs = []
    for threads in (1, 2):
        with BlockPool(threads) as pool:
            ws = Workspace(X, w, 5, chunk_size=64, pool=pool)
            assert len(list(iter_chunks(X.shape[0], ws.chunk_size))) > 2
            sigma = 0.0 if assignment == "hard" else 4.0
            num, den, stats = ws.step(C, sigma, assignment, need_spread=assignment != "hard")
            found: list[object] = [num, den, stats.spread, stats.objective, stats.inertia]
            found += [stats.mean_nnz, stats.n_soft, stats.soft_weight, ws.labels.clone()]
            moved, _ = ws.update(num, num, den)
            # a warm hard pass: the kept sums corrected block by block
            warm_num, warm_den, warm_stats = ws.step(moved, 0.0, "hard", warm=True)
            found += [warm_num, warm_den, warm_stats.inertia, ws.min_dist.clone()]
            found += [*ws.two_nearest(C), ws.hard_labels(C), ws.labels.clone()]
            outputs.append(found)
    for a, b in zip(*outputs, strict=True):
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


@pytest.mark.parametrize("assignment", ("hard", "entmax15"))
def test_a_fit_on_two_threads_equals_one_thread(assignment: str) -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 4)) + rng.integers(0, 4, size=(3000, 1)) * 3.0
    before = torch.get_num_threads()
    fits = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            model = RBFKMeans(6, assignment=assignment, chunk_size=256, random_state=0)
            fits.append(model.set_params(device="cpu").fit(X))
            assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(before)
    one, two = fits
    np.testing.assert_array_equal(one.labels_, two.labels_)
    np.testing.assert_array_equal(one.cluster_centers_, two.cluster_centers_)
    assert one.inertia_ == two.inertia_ and one.history_ == two.history_


def test_a_fit_frames_its_data_on_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Framing runs inside the fit's pool, with torch on the caller's thread alone: an op
    parallelised on its own leaves torch's OpenMP workers spinning on the cores the
    pool's blocks then need."""
    import rbfkm_engine.model as model_module

    seen: list[int] = []
    frame = model_module.into_fit_frame

    def recording(*args: object, **kwargs: object) -> object:
        seen.append(torch.get_num_threads())
        return frame(*args, **kwargs)

    monkeypatch.setattr(model_module, "into_fit_frame", recording)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        X = np.random.default_rng(0).normal(size=(500, 3))
        RBFKMeans(3, assignment="hard", random_state=0, device="cpu").fit(X)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen == [1]


def test_map_runs_at_most_two_blocks_per_thread_ahead() -> None:
    started: list[int] = []
    lock = threading.Lock()

    def fn(rows: slice) -> int:
        with lock:
            started.append(rows.start)
        return rows.start

    with BlockPool(2) as pool:
        results = pool.map(fn, [slice(i, i + 1) for i in range(20)])
        assert next(results) == 0
        # the first block's result is out: at most 2 x 2 blocks were submitted, one more
        # after it was taken
        with lock:
            assert len(started) <= 5
        assert list(results) == list(range(1, 20))
    assert sorted(started) == list(range(20))
