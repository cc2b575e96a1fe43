"""Scaled scores: the plain division's values and gradients, finite down to sigma = 1e-30."""

from __future__ import annotations

import math

import pytest
import torch

from rbfkm_engine.nn import RBFKMeansLayer
from rbfkm_engine.nn.scores import SCORE_FLOOR, scaled_scores

#: sigma = 1, 1e-5, ..., 1e-30.
SIGMAS = [10.0**-p for p in range(0, 31, 5)]
MAPS = ("softmax", "entmax15", "hard_st")


def test_scores_are_the_plain_division_with_its_gradients() -> None:
    gen = torch.Generator().manual_seed(0)
    e = (torch.rand(5, 4, generator=gen, dtype=torch.float64) * 3).requires_grad_(True)
    log_sigma = torch.tensor(math.log(0.7), dtype=torch.float64, requires_grad=True)

    def plain(e_: torch.Tensor, ls: torch.Tensor) -> torch.Tensor:
        return -(e_ - e_.amin(dim=-1, keepdim=True).detach()) / ls.exp()

    torch.testing.assert_close(scaled_scores(e, log_sigma), plain(e, log_sigma))
    g = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    ours = torch.autograd.grad(scaled_scores(e, log_sigma), (e, log_sigma), g)
    theirs = torch.autograd.grad(plain(e, log_sigma), (e, log_sigma), g)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b)


def test_scores_are_clamped_at_the_floor() -> None:
    e = torch.tensor([[0.0, 1.0, 1e30]])
    z = scaled_scores(e, torch.tensor(math.log(1e-20)))
    assert z.tolist() == [[0.0, -SCORE_FLOOR, -SCORE_FLOOR]]


def _log_sigma_gradient(assignment: str, sigma: float, dtype: torch.dtype, scaled: bool) -> float:
    """d loss / d log sigma on fixed data; ``scaled``: the data times sqrt(sigma), so the
    responsibilities, and the gradient, are those at sigma = 1."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(64, 2, generator=gen, dtype=torch.float64)
    c = torch.randn(3, 2, generator=gen, dtype=torch.float64)
    scale = math.sqrt(sigma) if scaled else 1.0
    layer = RBFKMeansLayer(3, 2, assignment=assignment, sigma=sigma, learnable_sigma=True)
    layer = layer.to(dtype)
    layer.set_sigma(sigma)  # log sigma exactly in the dtype, not rounded to float32 first
    with torch.no_grad():
        layer.centroids.copy_(c * scale)
    target = torch.zeros(64, 3, dtype=dtype)
    target[:, 0] = 1.0
    ((layer((x * scale).to(dtype)) - target) ** 2).sum().backward()
    return float(layer.log_sigma.grad)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64))
@pytest.mark.parametrize("assignment", MAPS)
def test_log_sigma_gradient_finite_down_to_1e_30(assignment: str, dtype: torch.dtype) -> None:
    at_one = _log_sigma_gradient(assignment, 1.0, dtype, scaled=False)
    assert at_one != 0.0
    rtol = 1e-4 if dtype == torch.float32 else 1e-9
    for sigma in SIGMAS:
        # Data at the temperature's scale: the same gradient at every sigma.
        scaled = _log_sigma_gradient(assignment, sigma, dtype, scaled=True)
        assert scaled == pytest.approx(at_one, rel=rtol), sigma
        # Data at scale 1: the rows harden and the gradient goes to 0, finite all the way.
        fixed = _log_sigma_gradient(assignment, sigma, dtype, scaled=False)
        assert math.isfinite(fixed), sigma
    assert _log_sigma_gradient(assignment, 1e-30, dtype, scaled=False) == 0.0


def test_below_the_dtype_sigma_is_clamped_with_zero_gradient() -> None:
    layer = RBFKMeansLayer(3, 2, assignment="softmax", sigma=1e-300, learnable_sigma=True)
    x = torch.randn(10, 2)
    layer(x)[:, 0].sum().backward()
    assert float(layer.log_sigma.grad) == 0.0
