"""The layer on half-precision inputs and under autocast: float32 inside."""

from __future__ import annotations

import pytest
import torch

from rbfkm_engine.nn import RBFKMeansLayer, free_energy

HALVES = (torch.float16, torch.bfloat16)
MAPS = ("softmax", "entmax15", "hard_st")


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("assignment", MAPS)
def test_half_input_is_computed_in_float32(assignment: str, dtype: torch.dtype) -> None:
    # The half input's values, computed in float32, then rounded once to the input dtype.
    x = _far_from_origin().to(dtype)
    layer = RBFKMeansLayer(5, 8, assignment=assignment, sigma=4.0)
    with torch.no_grad():
        layer.centroids.copy_(x[:5].float())
    out = layer(x)
    assert out.dtype == dtype
    torch.testing.assert_close(out, layer(x.float()).to(dtype), atol=0, rtol=0)
    assert layer.cluster(x).responsibilities.dtype == torch.float32


@pytest.mark.parametrize("dtype", HALVES)
def test_half_layer_and_input_train_with_float32_sums(dtype: torch.dtype) -> None:
    torch.manual_seed(1)
    layer = RBFKMeansLayer(3, 4, assignment="softmax", sigma=0.5, learnable_sigma=True)
    layer = layer.to(dtype)
    x = torch.randn(2, 30, 4).to(dtype).requires_grad_(True)
    out = layer.cluster(x)
    assert out.responsibilities.dtype == torch.float32
    free_energy(out.responsibilities, out.energies, layer.sigma, "softmax").backward()
    for grad in (x.grad, layer.centroids.grad, layer.log_sigma.grad):
        assert grad.dtype == dtype and torch.isfinite(grad.float()).all()


def _far_from_origin(n: int = 50, d: int = 8, seed: int = 2) -> torch.Tensor:
    """Points whose squared norms dwarf their distances: a half-precision expansion of the
    distances loses them."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=gen) + 100.0


def test_autocast_does_not_lower_the_precision() -> None:
    x = _far_from_origin()
    layer = RBFKMeansLayer(4, 8, assignment="softmax", sigma=4.0)
    with torch.no_grad():
        layer.centroids.copy_(x[:4])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = layer(x)
    reference = layer(x)
    torch.testing.assert_close(inside, reference, atol=0, rtol=0)
    assert 0.1 < float(reference.detach().amax(dim=1).min()) < 0.9  # soft rows
