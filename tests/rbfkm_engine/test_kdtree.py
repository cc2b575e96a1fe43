"""Each point's nearest others from a k-d tree, against every pair's distance."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rbfkm_engine import native
from rbfkm_engine.kdtree import nearest_others


@pytest.mark.parametrize("d", (1, 3, 16))
def test_nearest_others_are_those_of_every_pair(d: int) -> None:
    points = np.random.default_rng(d).normal(size=(500, d))
    distance, index = nearest_others(points, 7)
    every = np.sqrt(((points[:, None, :] - points[None, :, :]) ** 2).sum(axis=2))
    assert index.dtype == np.int64 and index.shape == (500, 7)
    np.testing.assert_array_equal(index, np.argsort(every, axis=1, kind="stable")[:, :7])
    np.testing.assert_allclose(distance, np.sort(every, axis=1)[:, :7], rtol=1e-12, atol=1e-12)
    assert (index[:, 0] == np.arange(500)).all()  # each its own first


def test_a_sweeps_gaps_from_the_tree_are_those_of_the_blocks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Beyond one block of gaps a sweep's sorted gaps come from the tree: the same order
    and, up to rounding, the same gaps (both lowered by the same margin)."""
    gen = torch.Generator().manual_seed(0)
    means = torch.randn(300, 3, generator=gen, dtype=torch.float64)
    states = []
    for gap_block in (1024, 64):  # one block (every pair), or the tree
        monkeypatch.setattr(native, "GAP_BLOCK", gap_block)
        state = native.HartiganState(
            torch.zeros(10, dtype=torch.long), means, torch.ones(300), torch.zeros(10)
        )
        state.sort_gaps(20)
        states.append(state)
    blocks, tree = states
    assert blocks.order is not None and tree.order is not None
    assert blocks.gaps is not None and tree.gaps is not None
    assert torch.equal(blocks.order, tree.order)
    # The blocks take distances by a GEMM: a mean's own comes out near 1e-7, not 0.
    torch.testing.assert_close(blocks.gaps, tree.gaps, rtol=1e-9, atol=1e-6)
