"""RBFKMeansLayer: shapes, the simplex, modes, gradients (gradcheck in float64), training,
state, zero-temperature limits."""

from __future__ import annotations

import entmax
import numpy as np
import pytest
import torch
from torch.func import functional_call

from rbfkm_engine import RBFKMeansLayer

MAPS = ("softmax", "entmax15")
#: Every mode of the layer: map, kernel, metric, fixed-point iterations.
MODES = (
    {"assignment": "softmax"},
    {"assignment": "entmax15"},
    {"assignment": "hard"},
    {"assignment": "hard_st"},
    {"assignment": "softmax", "kernel": "student_t", "alpha": 2.0},
    {"assignment": "entmax15", "kernel": "student_t"},
    {"assignment": "softmax", "metric": "cosine"},
    {"assignment": "entmax15", "metric": "cosine"},
    {"assignment": "softmax", "n_iter": 2},
    {"assignment": "entmax15", "n_iter": 2},
    {"assignment": "hard", "n_iter": 2},
    {"assignment": "hard_st", "n_iter": 2},
)


def layer_inputs(n: int = 6, d: int = 3, k: int = 4, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=gen, dtype=torch.float64)


def squared_distances(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return ((x[:, None, :] - c[None, :, :]) ** 2).sum(-1)


def centroid_parameter(layer: torch.nn.Module, k: int, d: int) -> torch.nn.Parameter:
    found = [p for p in layer.parameters() if p.shape == (k, d)]
    assert len(found) == 1, [tuple(p.shape) for p in layer.parameters()]
    return found[0]


@pytest.mark.parametrize("assignment", (*MAPS, "hard"))
def test_forward_shape_and_simplex(assignment: str) -> None:
    torch.manual_seed(0)
    layer = RBFKMeansLayer(5, 3, assignment=assignment, sigma=1.0)
    x = torch.randn(11, 3)
    out = layer(x)
    assert out.shape == (11, 5)
    assert out.dtype == x.dtype
    assert torch.all(out >= 0)
    torch.testing.assert_close(out.sum(dim=1), torch.ones(11))
    if assignment == "hard":
        assert torch.all((out == 0) | (out == 1))


def test_layer_is_a_module_with_centroids() -> None:
    layer = RBFKMeansLayer(4, 2)
    assert isinstance(layer, torch.nn.Module)
    c = centroid_parameter(layer, 4, 2)
    assert c.requires_grad
    # sigma is fixed by default: it is not a trainable parameter.
    assert sum(p.numel() for p in layer.parameters() if p.requires_grad) == 8


def test_learnable_sigma_adds_one_parameter() -> None:
    layer = RBFKMeansLayer(4, 2, learnable_sigma=True)
    assert sum(p.numel() for p in layer.parameters() if p.requires_grad) == 9


@pytest.mark.parametrize("assignment", MAPS)
def test_forward_matches_reference_map(assignment: str) -> None:
    torch.manual_seed(1)
    sigma = 0.7
    layer = RBFKMeansLayer(4, 3, assignment=assignment, sigma=sigma).double()
    x = layer_inputs()
    c = centroid_parameter(layer, 4, 3).detach()
    z = -squared_distances(x, c) / sigma
    ref = torch.softmax(z, dim=1) if assignment == "softmax" else entmax.entmax_bisect(z, 1.5)
    torch.testing.assert_close(layer(x), ref, atol=1e-6, rtol=1e-6)


def _entmax_support_is_stable(z: torch.Tensor, margin: float = 1e-3) -> bool:
    """True when no score sits within margin of entmax15's threshold (so gradcheck is smooth)."""
    p = entmax.entmax_bisect(z, 1.5)
    tau = (z / 2 - p.sqrt()).masked_fill(p == 0, float("nan")).nanmean(dim=1, keepdim=True)
    gap = (z / 2 - tau).abs()
    return bool((gap > margin).all())


@pytest.mark.parametrize("assignment", MAPS)
@pytest.mark.parametrize("sigma", (0.5, 5.0))
def test_gradcheck_x_centroids_sigma(assignment: str, sigma: float) -> None:
    k, d = 4, 3
    torch.manual_seed(2)
    layer = RBFKMeansLayer(k, d, assignment=assignment, sigma=sigma, learnable_sigma=True).double()
    x = layer_inputs(n=5, d=d, seed=3).requires_grad_(True)
    if assignment == "entmax15":
        c = centroid_parameter(layer, k, d).detach()
        z = -squared_distances(x.detach(), c) / sigma
        assert _entmax_support_is_stable(z), "test points sit on a support boundary"
    names = [name for name, p in layer.named_parameters() if p.requires_grad]
    assert len(names) == 2
    params = tuple(
        p.detach().clone().requires_grad_(True)
        for name, p in layer.named_parameters()
        if name in names
    )

    def forward(x_: torch.Tensor, *ps: torch.Tensor) -> torch.Tensor:
        return functional_call(layer, dict(zip(names, ps, strict=True)), (x_,))

    assert torch.autograd.gradcheck(forward, (x, *params), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("assignment", MAPS)
def test_sigma_gradient_is_nonzero(assignment: str) -> None:
    torch.manual_seed(4)
    layer = RBFKMeansLayer(3, 2, assignment=assignment, sigma=2.0, learnable_sigma=True).double()
    x = layer_inputs(n=8, d=2, seed=5)
    target = torch.zeros(8, 3, dtype=torch.float64)
    target[:, 0] = 1.0
    ((layer(x) - target) ** 2).sum().backward()
    sigma_grads = [p.grad for p in layer.parameters() if p.numel() == 1]
    assert len(sigma_grads) == 1
    assert sigma_grads[0] is not None and sigma_grads[0].abs().item() > 0


@pytest.mark.parametrize("assignment", MAPS)
def test_gradients_through_entmax_zeros_are_finite(assignment: str) -> None:
    torch.manual_seed(6)
    layer = RBFKMeansLayer(6, 2, assignment=assignment, sigma=1e-3)
    x = (torch.randn(20, 2) * 5).requires_grad_(True)
    out = layer(x)
    assert torch.isfinite(out).all()
    out.pow(2).sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters() if p.grad is not None)


@pytest.mark.parametrize("assignment", MAPS)
def test_half_precision_input(assignment: str) -> None:
    torch.manual_seed(7)
    layer = RBFKMeansLayer(4, 3, assignment=assignment, sigma=0.5)
    x = torch.randn(9, 3)
    out = layer.half()(x.half())
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float().sum(dim=1), torch.ones(9), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("assignment", MAPS)
def test_training_loop_decreases_loss(assignment: str) -> None:
    # Two labelled blobs, a layer with two centroids started away from them: training
    # the centroids (and sigma) to match the labels must lower the loss a lot.
    gen = torch.Generator().manual_seed(8)
    a = torch.randn(40, 2, generator=gen) * 0.3 + torch.tensor([3.0, 0.0])
    b = torch.randn(40, 2, generator=gen) * 0.3 + torch.tensor([-3.0, 0.0])
    x = torch.cat([a, b])
    target = torch.zeros(80, 2)
    target[:40, 0] = 1.0
    target[40:, 1] = 1.0
    torch.manual_seed(9)
    layer = RBFKMeansLayer(2, 2, assignment=assignment, sigma=4.0, learnable_sigma=True)
    with torch.no_grad():
        centroid_parameter(layer, 2, 2).copy_(torch.tensor([[0.0, 1.0], [0.0, -1.0]]))
    opt = torch.optim.Adam(layer.parameters(), lr=0.1)
    losses = []
    for _ in range(100):
        opt.zero_grad()
        loss = ((layer(x) - target) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0], (losses[0], losses[-1])
    c = centroid_parameter(layer, 2, 2).detach()
    assert c[0, 0] > 1.0 and c[1, 0] < -1.0


@pytest.mark.parametrize("assignment", MAPS)
def test_state_dict_round_trip(assignment: str) -> None:
    torch.manual_seed(10)
    layer = RBFKMeansLayer(5, 3, assignment=assignment, sigma=0.8, learnable_sigma=True)
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.1)
    twin = RBFKMeansLayer(5, 3, assignment=assignment, sigma=3.0, learnable_sigma=True)
    twin.load_state_dict(layer.state_dict())
    x = torch.randn(7, 3)
    torch.testing.assert_close(twin(x), layer(x))


def test_fixed_sigma_is_in_state_dict() -> None:
    layer = RBFKMeansLayer(3, 2, assignment="softmax", sigma=0.25)
    twin = RBFKMeansLayer(3, 2, assignment="softmax", sigma=4.0)
    twin.load_state_dict(layer.state_dict())
    x = torch.randn(5, 2)
    torch.testing.assert_close(twin(x), layer(x))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"assignment": "sparsemax"}, "assignment"),
        ({"sigma": 0.0}, "sigma"),
        ({"sigma": -1.0}, "sigma"),
        ({"metric": "manhattan"}, "metric"),
        ({"kernel": "laplace"}, "kernel"),
        ({"alpha": 0.0}, "alpha"),
        ({"n_iter": -1}, "n_iter"),
        ({"n_iter": 1.5}, "n_iter"),
    ],
)
def test_layer_parameter_validation(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        RBFKMeansLayer(3, 2, **kwargs)  # type: ignore[arg-type]


def test_wrong_feature_count_raises() -> None:
    layer = RBFKMeansLayer(3, 2)
    with pytest.raises((ValueError, RuntimeError)):
        layer(torch.randn(4, 5))


@pytest.mark.parametrize("assignment", (*MAPS, "hard"))
def test_from_estimator_matches_soft_assign(assignment: str) -> None:
    from rbfkm_engine import RBFKMeans

    gen = torch.Generator().manual_seed(11)
    X = torch.cat([torch.randn(40, 2, generator=gen) + 4, torch.randn(40, 2, generator=gen) - 4])
    X = X.double()
    est = RBFKMeans(n_clusters=3, assignment=assignment, device="cpu", random_state=0)
    est.fit(X.numpy())
    layer = RBFKMeansLayer.from_estimator(est, sigma=0.7).double()
    expected = torch.from_numpy(est.soft_assign(X.numpy(), sigma=0.7).toarray())
    torch.testing.assert_close(layer(X), expected, atol=1e-6, rtol=1e-6)
    c = centroid_parameter(layer, 3, 2).detach()
    np.testing.assert_allclose(c.numpy(), est.cluster_centers_, rtol=1e-6)


def mode_id(mode: dict[str, object]) -> str:
    return "-".join(f"{v}" for v in mode.values())


@pytest.mark.parametrize("mode", MODES, ids=mode_id)
def test_every_mode_state_dict_round_trip(mode: dict[str, object]) -> None:
    torch.manual_seed(12)
    layer = RBFKMeansLayer(4, 3, sigma=0.6, learnable_sigma=True, **mode)
    twin = RBFKMeansLayer(4, 3, sigma=2.0, learnable_sigma=True, **mode)
    twin.load_state_dict(layer.state_dict())
    x = torch.randn(3, 10, 3)
    torch.testing.assert_close(twin(x), layer(x))
    assert set(layer.state_dict()) == {"centroids", "log_sigma"}


@pytest.mark.parametrize("mode", MODES, ids=mode_id)
def test_every_mode_batched_matches_unbatched(mode: dict[str, object]) -> None:
    torch.manual_seed(13)
    layer = RBFKMeansLayer(4, 3, sigma=0.8, **mode).double()
    x = torch.randn(3, 10, 3, dtype=torch.float64)
    out = layer(x)
    assert out.shape == (3, 10, 4)
    for b in range(3):
        torch.testing.assert_close(out[b], layer(x[b]))


def _engine_labels(X: np.ndarray, metric: str, k: int) -> tuple[np.ndarray, np.ndarray]:
    """A fitted engine's centres and its labels, on the unit vectors for ``"cosine"``."""
    from rbfkm_engine import RBFKMeans

    if metric == "cosine":
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
    est = RBFKMeans(n_clusters=k, assignment="hard", device="cpu", random_state=0).fit(X)
    return est.cluster_centers_, est.predict(X)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64))
@pytest.mark.parametrize("mode", [m for m in MODES if "n_iter" not in m], ids=mode_id)
def test_zero_temperature_limit_is_kmeans_assignment(
    mode: dict[str, object], dtype: torch.dtype
) -> None:
    # At a vanishing temperature every mode's rows are one-hot on the K-Means label.
    gen = torch.Generator().manual_seed(14)
    X = (torch.randn(300, 3, generator=gen, dtype=torch.float64) + 2.0).numpy()
    centres, labels = _engine_labels(X, str(mode.get("metric", "euclidean")), 5)
    layer = RBFKMeansLayer(5, 3, sigma=1e-30, **mode).to(dtype)
    with torch.no_grad():
        layer.centroids.copy_(torch.from_numpy(centres))
    out = layer(torch.from_numpy(X).to(dtype))
    expected = torch.nn.functional.one_hot(torch.from_numpy(labels), 5).to(dtype)
    torch.testing.assert_close(out, expected, atol=0, rtol=0)


def _support_is_stable(layer: RBFKMeansLayer, x: torch.Tensor) -> bool:
    """No entmax15 score within a margin of its threshold (gradcheck's steps stay smooth)."""
    from rbfkm_engine.nn.kernels import dissimilarities, energies

    d = dissimilarities(x.detach(), layer.centroids.detach(), layer.metric)
    z = -energies(d, layer.kernel, layer.alpha) / float(layer.sigma.detach())
    return _entmax_support_is_stable(z)


class _Iterated(torch.nn.Module):
    """A layer's iterated centres as a module's output (for ``functional_call``)."""

    def __init__(self, layer: RBFKMeansLayer) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer.cluster(x).centroids


def _checked_modes() -> list[dict[str, object]]:
    """hard_st's gradient is the softmax's by design (test_maps.py checks it); a hard
    layer's rows have none (checked below), its iterated centres, Lloyd's means, do."""
    return [m for m in MODES if m["assignment"] == "hard_st" or m == {"assignment": "hard"}]


@pytest.mark.parametrize("mode", [m for m in MODES if m not in _checked_modes()], ids=mode_id)
def test_gradcheck_every_mode(mode: dict[str, object]) -> None:
    k, d = 3, 2
    torch.manual_seed(15)
    layer = RBFKMeansLayer(k, d, sigma=0.5, learnable_sigma=True, **mode).double()
    x = layer_inputs(n=6, d=d, seed=16).requires_grad_(True)
    if mode["assignment"] == "entmax15" and "n_iter" not in mode:
        assert _support_is_stable(layer, x), "test points sit on a support boundary"
    module = _Iterated(layer) if mode["assignment"] == "hard" else layer
    names = [name for name, p in module.named_parameters() if name.endswith("centroids")]
    if mode["assignment"] != "hard":
        names = [name for name, _ in module.named_parameters()]
    params = tuple(module.get_parameter(n).detach().clone().requires_grad_(True) for n in names)

    def forward(x_: torch.Tensor, *ps: torch.Tensor) -> torch.Tensor:
        return functional_call(module, dict(zip(names, ps, strict=True)), (x_,))

    assert torch.autograd.gradcheck(forward, (x, *params), eps=1e-6, atol=1e-5)


def test_hard_rows_have_no_gradient() -> None:
    layer = RBFKMeansLayer(3, 2, assignment="hard", learnable_sigma=True)
    assert not layer(torch.randn(5, 2, requires_grad=True)).requires_grad
