"""Dissimilarities and kernels: the metrics' values, DEC's Student-t at sigma = 1."""

from __future__ import annotations

import pytest
import torch

from rbfkm_engine.nn import RBFKMeansLayer
from rbfkm_engine.nn.kernels import dissimilarities, energies


def test_euclidean_is_squared_distance_batched_centres() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 7, 3, generator=gen, dtype=torch.float64)
    c = torch.randn(2, 4, 3, generator=gen, dtype=torch.float64)
    expected = ((x[:, :, None, :] - c[:, None, :, :]) ** 2).sum(-1)
    torch.testing.assert_close(dissimilarities(x, c, "euclidean"), expected)


def test_cosine_is_one_minus_cosine() -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(6, 5, generator=gen, dtype=torch.float64)
    c = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    cos = torch.nn.functional.cosine_similarity(x[:, None, :], c[None, :, :], dim=-1)
    torch.testing.assert_close(dissimilarities(x, c, "cosine"), 1.0 - cos)
    # Scale-free: only directions count.
    torch.testing.assert_close(dissimilarities(3.0 * x, 0.1 * c, "cosine"), 1.0 - cos)


@pytest.mark.parametrize("alpha", (1.0, 3.5))
def test_student_t_softmax_at_sigma_one_is_dec_assignment(alpha: float) -> None:
    torch.manual_seed(2)
    layer = RBFKMeansLayer(4, 3, assignment="softmax", kernel="student_t", alpha=alpha).double()
    x = torch.randn(9, 3, dtype=torch.float64)
    d = ((x[:, None, :] - layer.centroids.detach()[None]) ** 2).sum(-1)
    q = (1.0 + d / alpha) ** (-(alpha + 1.0) / 2.0)
    torch.testing.assert_close(layer(x), q / q.sum(dim=1, keepdim=True))


def test_energies_increase_with_distance() -> None:
    d = torch.linspace(0, 50, 101, dtype=torch.float64)
    for kernel in ("gaussian", "student_t"):
        assert torch.all(torch.diff(energies(d, kernel, 2.0)) > 0)
