"""The passes that price the local search's moves."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rbfkm_engine import search_passes
from rbfkm_engine.passes import Workspace
from rbfkm_engine.search_passes import cluster_halves, hartigan_sweep
from rbfkm_engine.swaps import split_gain

from .test_native import hartigan_sweep_reference, needs_compiler, sweep_state
from .test_swaps import sse


@pytest.mark.parametrize("projection", ("gemm", "gather"))
def test_cluster_halves_find_the_two_blobs_of_one_cluster(
    projection: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = 0 if projection == "gather" else 2
    monkeypatch.setattr(search_passes, "PROJECTION_GEMM_MAX_K", limit)
    rng = np.random.default_rng(0)
    left = rng.normal(size=(200, 3)) * 0.3 + [-4.0, 1.0, 0.0]
    right = rng.normal(size=(100, 3)) * 0.3 + [4.0, -1.0, 0.0]
    far = rng.normal(size=(50, 3)) * 0.3 + [0.0, 30.0, 0.0]
    X = torch.as_tensor(np.concatenate([left, right, far]))
    fp = Workspace(X, None, 2, chunk_size=64)
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
