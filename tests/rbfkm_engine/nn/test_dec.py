"""DEC's target distribution and KL loss."""

from __future__ import annotations

import torch

from rbfkm_engine.nn import RBFKMeansLayer, dec_loss, dec_target


def _q(seed: int = 0) -> torch.Tensor:
    torch.manual_seed(seed)
    layer = RBFKMeansLayer(4, 3, assignment="softmax", kernel="student_t").double()
    return layer(torch.randn(2, 25, 3, dtype=torch.float64))


def test_target_formula_rows_and_detach() -> None:
    q = _q().detach().requires_grad_(True)
    p = dec_target(q)
    assert not p.requires_grad
    torch.testing.assert_close(p.sum(dim=-1), torch.ones(2, 25, dtype=torch.float64))
    b = 1  # per batch: p_ij ∝ q_ij^2 / sum_i q_ij
    w = q[b] ** 2 / q[b].sum(dim=0)
    torch.testing.assert_close(p[b], (w / w.sum(dim=1, keepdim=True)).detach())
    # Sharper: the confident assignments gain weight on average.
    assert (p.amax(dim=-1) >= q.amax(dim=-1) - 0.05).float().mean() > 0.9


def test_loss_is_kl_divergence() -> None:
    q = _q(1).detach().requires_grad_(True)
    p = dec_target(q)
    expected = torch.nn.functional.kl_div(
        q.log().reshape(-1, 4), p.reshape(-1, 4), reduction="batchmean"
    )
    loss = dec_loss(q)
    torch.testing.assert_close(loss, expected)
    loss.backward()
    assert torch.isfinite(q.grad).all() and q.grad.abs().sum() > 0


def test_loss_with_zero_responsibilities_is_finite() -> None:
    q = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]], dtype=torch.float64)
    q.requires_grad_(True)
    loss = dec_loss(q)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(q.grad).all()


def test_training_on_dec_loss_sharpens() -> None:
    torch.manual_seed(2)
    x = torch.cat([torch.randn(40, 2) * 0.5 + 2, torch.randn(40, 2) * 0.5 - 2])
    layer = RBFKMeansLayer(2, 2, assignment="softmax", kernel="student_t")
    with torch.no_grad():
        layer.centroids.copy_(torch.tensor([[0.5, 0.5], [-0.5, -0.5]]))
    opt = torch.optim.SGD(layer.parameters(), lr=0.5)
    start = layer(x).amax(dim=1).mean().item()
    for _ in range(50):
        opt.zero_grad()
        dec_loss(layer(x)).backward()
        opt.step()
    assert layer(x).amax(dim=1).mean().item() > start + 0.05
