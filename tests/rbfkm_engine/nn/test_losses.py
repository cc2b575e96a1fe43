"""The free energy (the engine's objective) and the commitment loss."""

from __future__ import annotations

import pytest
import torch

from rbfkm_engine.assign import entmax15_map, softmax_map
from rbfkm_engine.nn import RBFKMeansLayer, commitment_loss, entropy, free_energy


def _layer_and_data(assignment: str, sigma: float = 0.8, seed: int = 0):
    torch.manual_seed(seed)
    layer = RBFKMeansLayer(4, 3, assignment=assignment, sigma=sigma).double()
    x = torch.randn(30, 3, dtype=torch.float64)
    return layer, x


@pytest.mark.parametrize(
    ("assignment", "engine_map"), [("softmax", softmax_map), ("entmax15", entmax15_map)]
)
def test_free_energy_is_engine_objective(assignment: str, engine_map) -> None:
    layer, x = _layer_and_data(assignment)
    out = layer.cluster(x)
    j = free_energy(out.responsibilities, out.energies, 0.8, assignment, reduction="sum")
    estep = engine_map(layer.distances(x).detach().clone(), 0.8)
    torch.testing.assert_close(j, estep.energy.sum())


@pytest.mark.parametrize("assignment", ("softmax", "entmax15"))
def test_map_minimises_free_energy(assignment: str) -> None:
    layer, x = _layer_and_data(assignment, seed=1)
    out = layer.cluster(x)
    best = free_energy(out.responsibilities, out.energies, 0.8, assignment)
    gen = torch.Generator().manual_seed(2)
    for _ in range(5):
        other = torch.softmax(torch.randn(30, 4, generator=gen, dtype=torch.float64), dim=1)
        mixed = 0.9 * out.responsibilities + 0.1 * other
        assert free_energy(mixed, out.energies, 0.8, assignment) > best


@pytest.mark.parametrize("assignment", ("softmax", "entmax15"))
def test_free_energy_gradients_are_envelope(assignment: str) -> None:
    # R minimises J for fixed centres: the gradient to c_j is sum_i R_ij 2 (c_j - x_i) / n,
    # the M-step's direction, and to log sigma -sigma mean_i H(R_i).
    layer, x = _layer_and_data(assignment, seed=3)
    layer = RBFKMeansLayer(4, 3, assignment=assignment, sigma=0.8, learnable_sigma=True)
    layer = layer.double()
    out = layer.cluster(x)
    free_energy(out.responsibilities, out.energies, layer.sigma, assignment).backward()
    r = out.responsibilities.detach()
    c = layer.centroids.detach()
    expected = 2.0 * (r.sum(0)[:, None] * c - r.T @ x) / x.shape[0]
    torch.testing.assert_close(layer.centroids.grad, expected)
    h = entropy(r, assignment).mean()
    torch.testing.assert_close(layer.log_sigma.grad, -0.8 * h)


def test_free_energy_at_zero_temperature_is_inertia() -> None:
    layer, x = _layer_and_data("entmax15")
    layer.set_sigma(1e-12)
    out = layer.cluster(x)
    inertia = layer.distances(x).amin(dim=1).mean()
    torch.testing.assert_close(
        free_energy(out.responsibilities, out.energies, 1e-12, "entmax15"), inertia
    )


def test_entropies() -> None:
    uniform = torch.full((1, 4), 0.25, dtype=torch.float64)
    one_hot = torch.tensor([[0.0, 1.0, 0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(entropy(uniform, "softmax"), torch.log(torch.tensor([4.0]).double()))
    torch.testing.assert_close(
        entropy(uniform, "entmax15"), torch.tensor([(4 / 3) * (1 - 4 * 0.25**1.5)]).double()
    )
    h = entropy(one_hot, "softmax")
    assert h.item() == 0.0
    h.sum().backward()
    assert torch.isfinite(one_hot.grad).all()


def test_weighted_free_energy_equals_repeated_points() -> None:
    layer, x = _layer_and_data("softmax", seed=4)
    w = torch.tensor([1.0, 2.0, 3.0] * 10, dtype=torch.float64)
    out = layer.cluster(x)
    weighted = free_energy(out.responsibilities, out.energies, 0.8, "softmax", weights=w)
    repeated = x.repeat_interleave(w.long(), dim=0)
    out_r = layer.cluster(repeated)
    torch.testing.assert_close(
        weighted, free_energy(out_r.responsibilities, out_r.energies, 0.8, "softmax")
    )
    with pytest.raises(ValueError, match="reduction"):
        free_energy(out.responsibilities, out.energies, 0.8, "softmax", reduction="none")


def test_commitment_loss_moves_inputs_not_centres() -> None:
    torch.manual_seed(5)
    layer = RBFKMeansLayer(3, 2, assignment="hard_st").double()
    x = torch.randn(10, 2, dtype=torch.float64, requires_grad=True)
    out = layer.cluster(x)
    loss = commitment_loss(x, out.centroids, out.responsibilities)
    labels = out.responsibilities.argmax(dim=1)
    expected = ((x - layer.centroids[labels]) ** 2).sum(dim=1).mean()
    torch.testing.assert_close(loss, expected)
    loss.backward()
    assert layer.centroids.grad is None
    torch.testing.assert_close(x.grad, 2.0 * (x - layer.centroids[labels]).detach() / 10)
