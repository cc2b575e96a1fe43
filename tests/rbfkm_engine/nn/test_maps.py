"""The layer's maps: the straight-through estimator's value and gradient."""

from __future__ import annotations

import torch

from rbfkm_engine.nn.maps import one_hot_argmin, responsibilities


def test_one_hot_argmin_ties_take_lowest_index() -> None:
    d = torch.tensor([[1.0, 0.5, 0.5], [0.0, 0.0, 2.0]])
    expected = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    torch.testing.assert_close(one_hot_argmin(d, torch.float32), expected)


def test_straight_through_is_hard_forward_softmax_backward() -> None:
    gen = torch.Generator().manual_seed(0)
    d = torch.rand(8, 5, generator=gen, dtype=torch.float64) * 3
    z = (-d).requires_grad_(True)
    out = responsibilities(z, d, "hard_st")
    assert torch.equal(out, one_hot_argmin(d, torch.float64))  # exactly one-hot
    g = torch.randn(8, 5, generator=gen, dtype=torch.float64)
    (grad_st,) = torch.autograd.grad(out, z, g)
    (grad_soft,) = torch.autograd.grad(responsibilities(z, d, "softmax"), z, g)
    torch.testing.assert_close(grad_st, grad_soft)
    assert grad_st.abs().sum() > 0


def test_hard_has_no_gradient() -> None:
    d = torch.rand(4, 3, dtype=torch.float64)
    z = (-d).requires_grad_(True)
    assert not responsibilities(z, d, "hard").requires_grad
