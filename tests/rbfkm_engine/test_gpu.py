"""device="cuda": same answers as the CPU, in float32 and float64; the layer on CUDA."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rbfkm_engine import RBFKMeans, RBFKMeansLayer

from .conftest import well_separated_blobs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

ASSIGNMENTS = ("hard", "softmax", "entmax15")


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
@pytest.mark.parametrize("dtype", ("float32", "float64"))
def test_cuda_fit_matches_cpu(assignment: str, dtype: str) -> None:
    data = well_separated_blobs(n=600, k=5, d=2, seed=0)
    init = data.X[[0, 1, 2, 3, 4]]
    params = dict(n_clusters=5, assignment=assignment, dtype=dtype, init=init, random_state=0)
    cpu = RBFKMeans(device="cpu", **params).fit(data.X)
    # float32 products, as the CPU's: TF32 ones may take Lloyd along another path.
    gpu = RBFKMeans(device="cuda", matmul_precision="highest", **params).fit(data.X)
    assert isinstance(gpu.cluster_centers_, np.ndarray)
    assert gpu.cluster_centers_.dtype == cpu.cluster_centers_.dtype
    # The same centres, perhaps in another order: annealing from coincident centres
    # breaks their symmetry on rounding, which differs between devices.
    order = _matching(gpu.cluster_centers_, cpu.cluster_centers_)
    atol = 1e-3 if dtype == "float32" else 1e-8
    np.testing.assert_allclose(gpu.cluster_centers_, cpu.cluster_centers_[order], atol=atol)
    np.testing.assert_array_equal(order[gpu.labels_], cpu.labels_)
    np.testing.assert_allclose(gpu.inertia_, cpu.inertia_, rtol=1e-4)
    np.testing.assert_array_equal(gpu.predict(data.X), gpu.labels_)
    soft = gpu.soft_assign(data.X)
    np.testing.assert_allclose(soft.toarray().sum(axis=1), 1.0, rtol=1e-5)


def _matching(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For each row of ``a`` the nearest row of ``b``, checked to be a permutation."""
    order = ((a[:, None, :] - b[None, :, :]) ** 2).sum(axis=2).argmin(axis=1)
    assert sorted(order.tolist()) == list(range(len(b))), "the centres differ"
    return order


def test_cuda_index_device_string() -> None:
    data = well_separated_blobs(n=200, k=3, d=2, seed=1)
    m = RBFKMeans(n_clusters=3, device="cuda:0", random_state=0).fit(data.X)
    np.testing.assert_array_equal(m.predict(data.X), m.labels_)


def test_cuda_accepts_cuda_tensor() -> None:
    data = well_separated_blobs(n=200, k=3, d=2, seed=2)
    X = torch.from_numpy(data.X).float().cuda()
    m = RBFKMeans(n_clusters=3, device="cuda", random_state=0).fit(X)
    assert m.predict(X).shape == (200,)


def test_cuda_reproducible() -> None:
    data = well_separated_blobs(n=400, k=4, d=2, seed=3)
    a = RBFKMeans(n_clusters=4, device="cuda", random_state=5).fit(data.X)
    b = RBFKMeans(n_clusters=4, device="cuda", random_state=5).fit(data.X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    # CUDA index_add_ uses atomics: sums may differ in the last bits between runs.
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, atol=1e-4)


@pytest.mark.parametrize("assignment", ("softmax", "entmax15"))
def test_layer_on_cuda(assignment: str) -> None:
    torch.manual_seed(0)
    layer = RBFKMeansLayer(4, 3, assignment=assignment, sigma=2.0).cuda()
    x = torch.randn(16, 3, device="cuda", requires_grad=True)
    out = layer(x)
    assert out.device.type == "cuda"
    torch.testing.assert_close(out.sum(dim=1), torch.ones(16, device="cuda"))
    out[:, 0].sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    cpu_layer = RBFKMeansLayer(4, 3, assignment=assignment, sigma=2.0)
    cpu_layer.load_state_dict({k: v.cpu() for k, v in layer.state_dict().items()})
    torch.testing.assert_close(
        cpu_layer(x.detach().cpu()), out.detach().cpu(), atol=1e-5, rtol=1e-5
    )


def test_cuda_half_input_is_handled() -> None:
    data = well_separated_blobs(n=200, k=3, d=2, seed=4)
    m = RBFKMeans(n_clusters=3, device="cuda", random_state=0).fit(data.X)
    soft = m.soft_assign(data.X.astype(np.float16))
    assert np.all(np.isfinite(soft.data))


@pytest.mark.parametrize("precision", ("highest", "high", "medium"))
def test_every_matmul_precision_ends_on_a_float32_fixed_point(precision: str) -> None:
    # Lower-precision products find the fixed point; float32 passes confirm it, so the
    # fit's labels are predict's and a float32 Lloyd step no longer moves the centres.
    rng = np.random.default_rng(7)
    centres = rng.normal(scale=4.0, size=(64, 32))
    X = (centres[rng.integers(0, 64, 20_000)] + rng.normal(size=(20_000, 32))).astype(np.float32)
    params = dict(n_clusters=64, assignment="hard", random_state=0, tol=0.0, max_iter=200)
    gpu = RBFKMeans(device="cuda", matmul_precision=precision, **params).fit(X)
    exact = RBFKMeans(device="cuda", matmul_precision="highest", **params).fit(X)
    np.testing.assert_array_equal(gpu.predict(X), gpu.labels_)
    # A fixed point, judged in float64: the labels are the nearest centres (but for rows
    # within float32's rounding of a tie) and the centres are their points' means.
    X64, C64 = X.astype(np.float64), gpu.cluster_centers_.astype(np.float64)
    D = (X64**2).sum(axis=1)[:, None] - 2.0 * X64 @ C64.T + (C64**2).sum(axis=1)[None, :]
    assert np.mean(D.argmin(axis=1) != gpu.labels_) <= 1e-3
    means = np.stack([X64[gpu.labels_ == j].mean(axis=0) for j in range(64)])
    np.testing.assert_allclose(means, C64, atol=1e-4)
    assert gpu.inertia_ == pytest.approx(exact.inertia_, rel=1e-3)


def test_two_fits_share_one_gpu() -> None:
    # Each sizes its blocks from a share of the memory free when it starts.
    from concurrent.futures import ThreadPoolExecutor

    data = well_separated_blobs(n=50_000, k=8, d=16, seed=5)
    fit = lambda seed: RBFKMeans(8, device="cuda", random_state=seed).fit(data.X)  # noqa: E731
    with ThreadPoolExecutor(2) as pool:
        a, b = pool.map(fit, (0, 1))
    assert a.inertia_ == pytest.approx(b.inertia_, rel=1e-3)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
@pytest.mark.parametrize("init", ("k-means++", "random"))
def test_cuda_every_path_runs(assignment: str, init: str) -> None:
    # Grown (annealed) fits, k-means++ and random seeding, sample weights, and every
    # inference method: the paths the array-init comparison above does not take.
    data = well_separated_blobs(n=300, k=4, d=3, seed=5)
    w = np.random.default_rng(0).uniform(0.5, 2.0, data.X.shape[0])
    m = RBFKMeans(n_clusters=4, assignment=assignment, init=init, device="cuda", random_state=0)
    m.fit(data.X, sample_weight=w)
    np.testing.assert_array_equal(m.predict(data.X), m.labels_)
    assert m.transform(data.X).shape == (300, 4)
    np.testing.assert_allclose(-m.score(data.X, sample_weight=w), m.inertia_, rtol=1e-5)
    soft = m.soft_assign(data.X, sigma=m.sigma_ + 1.0)
    np.testing.assert_allclose(soft.toarray().sum(axis=1), 1.0, rtol=1e-5)
    again = RBFKMeans(n_clusters=4, assignment=assignment, init=init, device="cuda", random_state=0)
    np.testing.assert_array_equal(again.fit(data.X, sample_weight=w).labels_, m.labels_)


def test_cuda_wide_data_takes_lanczos() -> None:
    # More than SMALL_COVARIANCE features: lambda_max by scipy's eigsh, its products on
    # the device.
    X = np.random.default_rng(1).standard_normal((400, 300))
    m = RBFKMeans(n_clusters=3, assignment="softmax", device="cuda", random_state=0, max_iter=20)
    assert m.fit(X).cluster_centers_.shape == (3, 300)


def test_init_takes_a_generator_of_another_device() -> None:
    from rbfkm_engine.init import kmeans_plusplus, random_init

    X = torch.from_numpy(well_separated_blobs(n=200, k=3, d=2, seed=6).X).cuda()
    for init in (kmeans_plusplus, random_init):
        C = init(X, 3, generator=torch.Generator().manual_seed(0))
        assert C.device == X.device and C.shape == (3, 2)
