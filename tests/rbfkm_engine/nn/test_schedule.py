"""The temperature schedule and the critical temperature it starts from."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rbfkm_engine.nn import RBFKMeansLayer, SigmaScheduler, auto_sigma_min, critical_sigma
from rbfkm_engine.temperature import SIGMA0_MARGIN


def _blobs(seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    means = torch.tensor([[3.0, 0.0], [-3.0, 0.0]], dtype=torch.float64)
    return torch.cat(
        [torch.randn(100, 2, generator=gen, dtype=torch.float64) * 0.5 + m for m in means]
    )


def test_geometric_cooling_with_floor_like_lr_scheduler() -> None:
    layer = RBFKMeansLayer(3, 2, assignment="softmax", sigma=8.0)
    sched = SigmaScheduler(layer, sigma_min=1.0, cooling=0.5)
    seen = [sched.get_last_sigma()]
    for _ in range(5):
        sched.step()
        seen.append(float(layer.sigma))
    np.testing.assert_allclose(seen, [8.0, 4.0, 2.0, 1.0, 1.0, 1.0], rtol=1e-6)


def test_state_dict_resumes() -> None:
    layer = RBFKMeansLayer(3, 2, assignment="softmax", sigma=1.0)
    sched = SigmaScheduler(layer, sigma_min=1e-6, cooling=0.8)
    for _ in range(7):
        sched.step()
    other = RBFKMeansLayer(3, 2, assignment="softmax", sigma=5.0)
    resumed = SigmaScheduler(other, sigma_min=1.0, cooling=0.1)
    resumed.load_state_dict(sched.state_dict())
    sched.step()
    resumed.step()
    assert resumed.get_last_sigma() == pytest.approx(sched.get_last_sigma())
    assert float(other.sigma) == pytest.approx(1.0 * 0.8**8, rel=1e-6)


def test_many_steps_stay_at_the_floor_without_underflow() -> None:
    layer = RBFKMeansLayer(2, 2, assignment="softmax", sigma=1.0)
    sched = SigmaScheduler(layer, sigma_min=1e-30, cooling=0.5, last_epoch=100_000)
    assert sched.get_last_sigma() == 1e-30


@pytest.mark.parametrize(
    ("assignment", "gain"), [("softmax", 2.0), ("entmax15", 2.0 * math.sqrt(3))]
)
def test_critical_sigma_is_the_engines(assignment: str, gain: float) -> None:
    x = _blobs()
    layer = RBFKMeansLayer(3, 2, assignment=assignment)
    lambda_max = np.linalg.eigvalsh(np.cov(x.numpy().T, bias=True))[-1]
    assert critical_sigma(layer, x) == pytest.approx(SIGMA0_MARGIN * gain * lambda_max)
    assert auto_sigma_min(layer, x) == pytest.approx(1e-4 * 2.0 * lambda_max)


@pytest.mark.parametrize("assignment", ("softmax", "entmax15"))
def test_centres_split_only_below_critical_sigma(assignment: str) -> None:
    # Fixed-point iterations from two centres next to the mean: above the critical
    # temperature they fall back together, well below it they split.
    x = _blobs(1)
    layer = RBFKMeansLayer(2, 2, assignment=assignment, n_iter=200).double()
    sigma_c = critical_sigma(layer, x) / SIGMA0_MARGIN
    mean = x.mean(dim=0)
    spreads = []
    for factor in (1.2, 0.6):
        layer.set_sigma(factor * sigma_c)
        with torch.no_grad():
            layer.centroids.copy_(mean + torch.tensor([[1e-3, 1e-3], [-1e-3, -1e-3]]))
        c = layer.cluster(x).centroids
        spreads.append(float((c[0] - c[1]).detach().norm()))
    assert spreads[0] < 1e-3 < 1.0 < spreads[1], spreads


def test_from_data_runs_the_engines_schedule() -> None:
    x = _blobs()
    layer = RBFKMeansLayer(2, 2, assignment="hard_st")
    sched = SigmaScheduler.from_data(layer, x, cooling=0.5)
    assert float(layer.sigma) == pytest.approx(critical_sigma(layer, x), rel=1e-6)
    assert sched.sigma_min == pytest.approx(auto_sigma_min(layer, x))


@pytest.mark.parametrize(
    "kwargs", [{"assignment": "hard"}, {"kernel": "student_t"}, {"metric": "cosine"}]
)
def test_no_critical_sigma_outside_the_gaussian_maps(kwargs: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        critical_sigma(RBFKMeansLayer(2, 2, **kwargs), _blobs())


def test_validation() -> None:
    layer = RBFKMeansLayer(2, 2)
    with pytest.raises(ValueError, match="cooling"):
        SigmaScheduler(layer, sigma_min=0.1, cooling=1.0)
    with pytest.raises(ValueError, match="sigma"):
        SigmaScheduler(layer, sigma_min=0.0)
