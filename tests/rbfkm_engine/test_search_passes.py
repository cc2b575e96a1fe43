"""The passes that price the local search's moves."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rbfkm_engine import search_passes
from rbfkm_engine.native import lloyd_kernel
from rbfkm_engine.passes import Workspace
from rbfkm_engine.search_passes import cluster_halves, hartigan_moves, hartigan_sweep, label_means
from rbfkm_engine.swaps import split_gain

from .conftest import workspace_on
from .test_native import hartigan_sweep_reference, needs_compiler, sweep_state
from .test_swaps import sse


@pytest.mark.parametrize("projection", ("gemm", "gather", "kernel"))
def test_cluster_halves_find_the_two_blobs_of_one_cluster(
    projection: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if projection == "kernel" and lloyd_kernel(torch.zeros(1, 1), None) is None:
        pytest.skip("no C compiler: the kernel does not run")
    limit = 0 if projection == "gather" else 2
    monkeypatch.setattr(search_passes, "PROJECTION_GEMM_MAX_K", limit)
    rng = np.random.default_rng(0)
    left = rng.normal(size=(200, 3)) * 0.3 + [-4.0, 1.0, 0.0]
    right = rng.normal(size=(100, 3)) * 0.3 + [4.0, -1.0, 0.0]
    far = rng.normal(size=(50, 3)) * 0.3 + [0.0, 30.0, 0.0]
    X = torch.as_tensor(np.concatenate([left, right, far]))
    fp = Workspace(X, None, 2, chunk_size=64)
    if projection != "kernel":
        fp.kernel = None
    C = torch.stack([X[300:].mean(0), X[:300].mean(0)])  # the two blobs' cluster second
    fp.hard_labels(C)
    halves, mass = cluster_halves(fp, C, torch.Generator().manual_seed(0))
    found = sorted(halves[1].tolist())
    torch.testing.assert_close(
        torch.tensor(found),
        torch.tensor(sorted([left.mean(0).tolist(), right.mean(0).tolist()])),
        atol=1e-9,
        rtol=0.0,
    )
    assert sorted(mass[1].tolist()) == [100.0, 200.0]
    gain = split_gain(mass, halves)
    labels = np.r_[np.zeros(300, dtype=int), np.ones(50, dtype=int)]
    parts = np.r_[np.zeros(200, dtype=int), np.ones(100, dtype=int), np.full(50, 2)]
    ones = np.ones(350)
    assert float(gain[1]) == pytest.approx(
        sse(X.numpy(), labels, ones, 2) - sse(X.numpy(), parts, ones, 3)
    )


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("weighted", [False, True])
def test_the_kernels_halves_are_the_torch_passes(dtype: torch.dtype, weighted: bool) -> None:
    # The kernel splits every cluster in one call per step, block after block; the torch
    # passes the same way: the same halves and weights, all clusters or only the marked.
    gen = torch.Generator().manual_seed(3)
    n, k = 3000, 7
    X = (torch.randn(n, 5, generator=gen, dtype=torch.float64) * 2).to(dtype)
    w = torch.rand(n, generator=gen, dtype=torch.float64).to(dtype) + 0.5 if weighted else None
    C = X[:k] + 0.1  # not a row: no point exactly on a cluster's first split
    only = torch.tensor([True, False, True, True, False, True, True])
    for mask in (None, only):
        out = []
        for kernel in (True, False):
            ws = Workspace(X, w, k, chunk_size=512)
            if not kernel:
                ws.kernel = None
            ws.hard_labels(C)
            out.append(cluster_halves(ws, C, torch.Generator().manual_seed(0), only=mask))
        (halves, mass), (expected, expected_mass) = out
        assert halves.dtype == expected.dtype == dtype
        tol = 1e-4 if dtype == torch.float32 else 1e-9
        torch.testing.assert_close(halves, expected, atol=tol, rtol=tol)
        torch.testing.assert_close(mass, expected_mass, atol=tol, rtol=tol)
        if mask is not None:
            assert torch.equal(halves[~mask], C[~mask].unsqueeze(1).expand(-1, 2, -1))
            assert not mass[~mask].any()


@needs_compiler
def test_the_kernels_halves_of_an_empty_cluster_and_of_weightless_rows() -> None:
    # A cluster without points keeps its centre for both halves, weight 0; rows of weight
    # 0 move no mean and add no weight.
    gen = torch.Generator().manual_seed(4)
    X = torch.randn(400, 3, generator=gen, dtype=torch.float64)
    X[:200] += 10.0
    C = torch.stack([X[:200].mean(0), X[200:].mean(0), torch.full((3,), 100.0)])
    w = torch.ones(400, dtype=torch.float64)
    w[::2] = 0.0
    halves = []
    for weights, rows in ((w, slice(None)), (None, slice(1, None, 2))):
        ws = Workspace(X[rows].contiguous(), None if weights is None else weights, 3, 128)
        ws.hard_labels(C)
        halves.append(cluster_halves(ws, C, torch.Generator().manual_seed(0)))
    (weighted, mass), (odd, odd_mass) = halves
    assert torch.equal(weighted[2], C[2].expand(2, -1)) and not mass[2].any()
    torch.testing.assert_close(mass, odd_mass, rtol=0.0, atol=0.0)
    torch.testing.assert_close(weighted, odd, rtol=1e-12, atol=1e-12)


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("width", [3, 12])
def test_hartigan_sweeps_skip_pricing_without_changing_a_move(
    dtype: torch.dtype, width: int
) -> None:
    # Sweeps to a fixed point block by block, with the bounds each sweep leaves for the
    # next and the means' sorted gaps (all of them, or each cluster's 3 nearest, past which
    # a point's pricing goes on to the rest), and in one block with neither: the same
    # moves, the same fixed point.
    gen = torch.Generator().manual_seed(1)
    n, k = 2000, 12
    X = torch.randn(n, 3, generator=gen, dtype=dtype)
    w = torch.ones(n, dtype=dtype)
    labels = torch.cdist(X.double(), X[:k].double()).argmin(dim=1)
    blocked, whole = Workspace(X, None, k, chunk_size=128), Workspace(X, None, k, chunk_size=n)
    bounded, plain = sweep_state(X, w, labels, k), sweep_state(X, w, labels, k)
    sweeps = 0
    while True:
        bounded.sort_gaps(width)
        moved = hartigan_sweep(blocked, bounded)
        plain.lower.zero_()
        plain.travel = 0.0
        assert hartigan_sweep(whole, plain) == moved
        assert torch.equal(bounded.labels, plain.labels)
        assert bounded.gain == pytest.approx(plain.gain, rel=1e-9)
        sweeps += 1
        if moved == 0:
            break
    assert sweeps > 2
    # At the fixed point no single point pays to move.
    Xn, wn, fixed = X.double().numpy(), w.double().numpy(), bounded.labels.numpy().copy()
    hartigan_sweep_reference(Xn, wn, fixed, k)
    np.testing.assert_array_equal(fixed, bounded.labels.numpy())


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("d", [3, 40])  # the kernel's direct distances, or a GEMM's
@pytest.mark.parametrize("weighted", [False, True])
def test_a_kernel_batch_of_hartigan_moves_matches_the_torch_one(
    dtype: torch.dtype, d: int, weighted: bool
) -> None:
    gen = torch.Generator().manual_seed(d)
    n, k = 1500, 61
    truth = torch.arange(n) % (k - 1)
    X = 3 * torch.randn(k - 1, d, generator=gen, dtype=dtype)[truth]
    X += torch.randn(n, d, generator=gen, dtype=dtype)
    w = None
    if weighted:
        w = torch.rand(n, generator=gen, dtype=dtype) + 0.5
        w[::9] = 0.0  # weightless rows never move
    labels = truth.clone()  # a tenth of the rows mislabelled, and a cluster of one row,
    wrong = torch.rand(n, generator=gen) < 0.1  # which never leaves it
    labels[wrong] = torch.randint(0, k - 1, (int(wrong.sum()),), generator=gen)
    single = 1
    labels[single] = k - 1
    moved = {}
    for path in ("kernel", "torch"):
        ws = workspace_on(path, X, w, k, chunk_size=256)
        ws.hard_labels(X[:k].clone())
        means, mass = label_means(ws, labels, X[:k].clone())
        assert float(mass.min()) > 0
        out = labels.clone()
        count = hartigan_moves(ws, out, means, mass)
        moved[path] = (count, out)
    assert 30 < moved["torch"][0] < n
    if dtype == torch.float64:
        assert moved["kernel"][0] == moved["torch"][0]
        assert torch.equal(moved["kernel"][1], moved["torch"][1])
    else:  # float32 distances by another sum: a rare near-tie may go the other way
        assert (moved["kernel"][1] != moved["torch"][1]).sum() <= n // 200
    assert moved["kernel"][1][single] == k - 1
    if weighted:
        assert torch.equal(moved["kernel"][1][::9], labels[::9])


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("weighted", [False, True])
def test_hartigan_moves_from_neighbour_lists_are_those_of_every_mean(
    dtype: torch.dtype, weighted: bool
) -> None:
    """At 128 means or more on direct distances a row takes its candidates from its
    cluster's list where that decides its move: rounds of batches move the same rows to
    the same clusters as sweeps of every mean, and the lists decide most rows."""
    gen = torch.Generator().manual_seed(7)
    X = (torch.randn(20_000, 3, generator=gen, dtype=torch.float64) ** 3).to(dtype)
    w = (torch.rand(20_000, generator=gen, dtype=torch.float64) + 0.5).to(dtype)
    w = w if weighted else None
    k = 400
    C = X[:k].clone()
    runs = {}
    for lists in (True, False):
        ws = Workspace(X, w, k, 2048)
        decided: list[int] = []
        noted = ws.lists_used

        def counted(use, k, rows, scanned, noted=noted, decided=decided) -> None:
            decided.append(rows)
            noted(use, k, rows, scanned)

        ws.lists_used = counted  # type: ignore[method-assign]
        if not lists:
            ws.hartigan_neighbour_use.wanted = lambda: False  # type: ignore[method-assign]
        ws.hard_labels(C)
        labels = ws.labels.clone()
        means, mass = label_means(ws, labels, C)
        assert float(mass.min()) > 0
        counts = []
        for _ in range(3):
            counts.append(hartigan_moves(ws, labels, means, mass))
            means, mass = label_means(ws, labels, means)
        runs[lists] = (labels, counts, decided)
    (listed, counts, decided), (scanned, counts2, none) = runs[True], runs[False]
    assert none == [] and len(decided) == 3 and min(decided) > 0.8 * X.shape[0]
    assert counts == counts2 and counts[0] > 1000
    assert torch.equal(listed, scanned)
