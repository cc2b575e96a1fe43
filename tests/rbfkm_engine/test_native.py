"""rbfkm_engine/native.py and lloyd_kernel.c: the fused Lloyd kernel builds with the system's
C compiler, labels every row as the torch pass does (lowest index on ties), keeps the same
sums, and a fit is the same with it as without it; without a compiler, or switched off,
the passes stay in torch."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import torch

from rbfkm_engine import RBFKMeans, native, passes

from .test_swaps import sse

needs_compiler = pytest.mark.skipif(
    shutil.which(os.environ.get("CC", "cc")) is None, reason="needs a C compiler"
)


def kernel_for(dtype: torch.dtype) -> native.LloydKernel:
    lib = native.library()
    assert lib is not None, "the kernel did not build here"
    return native.LloydKernel(lib, dtype)


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("direct", [True, False])
def test_the_centres_layout_pads_their_norms_and_transposes_them(
    dtype: torch.dtype, direct: bool
) -> None:
    """``c_sq`` the rows' squared norms as torch sums them (bit for bit), ``+inf`` past
    ``k``; ``CT`` exactly ``-2 C^T``, zero past ``k``; from a non-contiguous ``C`` too."""
    C = torch.randn(5, 13, generator=torch.Generator().manual_seed(0), dtype=dtype)[:, ::2]
    centres = kernel_for(dtype).centres(C, 16, direct=direct)
    assert torch.equal(centres.c_sq[:5], C.square().sum(dim=1))
    assert torch.isinf(centres.c_sq[5:]).all() and centres.width == 16
    if not direct:
        assert centres.CT is None
        return
    assert centres.CT is not None and centres.CT.shape == (7, 16)
    assert torch.equal(centres.CT[:, :5], -2 * C.T)
    assert not centres.CT[:, 5:].any()


def reference(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """Exact squared distances in float64 (n x k)."""
    return torch.cdist(X.double(), C.double()).square()


def run_block(
    kernel: native.LloydKernel,
    X: torch.Tensor,
    C: torch.Tensor,
    w: torch.Tensor | None,
    labels: torch.Tensor,
    mode: int,
    num: torch.Tensor,
    den: torch.Tensor,
) -> tuple[torch.Tensor, float]:
    """One block over all of X, the GEMM block made as the workspace makes it."""
    k = C.shape[0]
    width = passes.row_reduction_width(k, C.device)
    centres = kernel.centres(C, width)
    D = None
    if centres.CT is None:
        D = torch.full((X.shape[0], width), float("inf"), dtype=X.dtype)
        torch.addmm(centres.c_sq[:k].unsqueeze(0), X, C.T, alpha=-2.0, out=D[:, :k])
    min_dist = torch.empty(X.shape[0], dtype=X.dtype)
    x_sq = X.square().sum(dim=1)
    inertia = kernel.block(native.Rows(X, x_sq, w, labels, min_dist), centres, D, num, den, mode)
    return min_dist, inertia


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("d", [1, 3, 32, 33, 64])
@pytest.mark.parametrize("k", [1, 5, 16, 37])
def test_block_labels_distances_and_sums_match_torch(dtype: torch.dtype, d: int, k: int) -> None:
    gen = torch.Generator().manual_seed(d * 100 + k)
    X = torch.randn(3001, d, generator=gen, dtype=dtype)
    C = torch.randn(k, d, generator=gen, dtype=dtype)
    w = torch.rand(3001, generator=gen, dtype=dtype)
    kernel = kernel_for(dtype)
    labels = torch.zeros(3001, dtype=torch.long)
    num = torch.zeros((k, d), dtype=torch.float64)
    den = torch.zeros(k, dtype=torch.float64)
    min_dist, inertia = run_block(kernel, X, C, w, labels, native.ADD, num, den)

    exact = reference(X, C)
    best = exact.min(dim=1).values
    # The chosen centre is the nearest up to the rounding of the expansion in ``dtype``.
    slack = (
        64
        * torch.finfo(dtype).eps
        * (X.double().square().sum(1) + C.double().square().sum(1).max())
    )
    assert bool((exact.gather(1, labels[:, None]).squeeze(1) <= best + slack).all())
    torch.testing.assert_close(min_dist.double(), best, atol=float(slack.max()), rtol=0)
    assert inertia == pytest.approx(float((w.double() * min_dist.double()).sum()), rel=1e-12)
    ref_num = torch.zeros((k, d), dtype=torch.float64).index_add_(
        0, labels, X.double() * w.double()[:, None]
    )
    ref_den = torch.zeros(k, dtype=torch.float64).index_add_(0, labels, w.double())
    torch.testing.assert_close(num, ref_num)
    torch.testing.assert_close(den, ref_den)


@needs_compiler
@pytest.mark.parametrize("d", [2, 48])
def test_ties_go_to_the_lowest_index(d: int) -> None:
    C = torch.zeros(20, d)
    C[3] = 1.0
    C[11] = 1.0  # 3 and 11 coincide; 0-2, 4-10, 12-19 coincide at the origin
    X = torch.full((5, d), 1.0)
    X[0] = 0.0
    labels = torch.full((5,), 19, dtype=torch.long)  # the last pass's labels do not count
    run_block(kernel_for(torch.float32), X, C, None, labels, native.LABEL, None, None)
    assert labels.tolist() == [0, 3, 3, 3, 3]
    assert labels.tolist() == torch.cdist(X, C).argmin(dim=1).tolist()


@needs_compiler
@pytest.mark.parametrize("d", [3, 40])
def test_moving_rows_between_kept_sums_equals_summing_afresh(d: int) -> None:
    gen = torch.Generator().manual_seed(d)
    X = torch.randn(2000, d, generator=gen, dtype=torch.float64)
    C0 = torch.randn(9, d, generator=gen, dtype=torch.float64)
    C1 = C0 + 0.3 * torch.randn(9, d, generator=gen, dtype=torch.float64)
    kernel = kernel_for(torch.float64)

    def sums() -> tuple[torch.Tensor, torch.Tensor]:
        return torch.zeros((9, d), dtype=torch.float64), torch.zeros(9, dtype=torch.float64)

    labels = torch.zeros(2000, dtype=torch.long)
    num, den = sums()
    run_block(kernel, X, C0, None, labels, native.ADD, num, den)
    before = labels.clone()
    run_block(kernel, X, C1, None, labels, native.MOVE, num, den)
    assert bool((labels != before).any())  # some rows moved
    fresh_labels = torch.zeros(2000, dtype=torch.long)
    fresh_num, fresh_den = sums()
    run_block(kernel, X, C1, None, fresh_labels, native.ADD, fresh_num, fresh_den)
    assert torch.equal(labels, fresh_labels)
    torch.testing.assert_close(num, fresh_num)
    torch.testing.assert_close(den, fresh_den)


@needs_compiler
@pytest.mark.parametrize("n_features", [3, 64])
def test_a_fit_is_the_same_with_and_without_the_kernel(
    n_features: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(6000, n_features=n_features, centers=12, random_state=1)
    X = X.astype(np.float32)
    with_kernel = RBFKMeans(12, random_state=0).fit(X)
    monkeypatch.setattr(passes, "lloyd_kernel", lambda X, w: None)
    in_torch = RBFKMeans(12, random_state=0).fit(X)
    assert np.array_equal(with_kernel.labels_, in_torch.labels_)
    np.testing.assert_allclose(with_kernel.cluster_centers_, in_torch.cluster_centers_, atol=1e-4)
    assert with_kernel.inertia_ == pytest.approx(in_torch.inertia_, rel=1e-5)


@needs_compiler
def test_the_workspace_uses_the_kernel_on_the_cpu() -> None:
    X = torch.randn(100, 3)
    assert passes.Workspace(X, None, 4, 64).kernel is not None
    assert passes.Workspace(X.double(), None, 4, 64).kernel is not None
    # Weights of another type, or rows that are not contiguous: torch's passes.
    assert passes.Workspace(X, torch.ones(100, dtype=torch.float64), 4, 64).kernel is None
    assert passes.Workspace(X.T.contiguous().T, None, 4, 64).kernel is None


@needs_compiler
def test_builds_into_a_fresh_cache(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RBFKM_CACHE_DIR", str(tmp_path))
    lib = native.library.__wrapped__()
    assert lib is not None
    built = list((tmp_path / "native").glob("lloyd-*.so"))
    assert len(built) == 1
    assert not [p for p in (tmp_path / "native").iterdir() if p not in built]  # no leftovers


def test_without_a_compiler_the_passes_stay_in_torch(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RBFKM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    assert native.library.__wrapped__() is None
    monkeypatch.setenv("CC", "false")  # runs, and fails every build
    assert native.library.__wrapped__() is None
    assert not list((tmp_path / "native").glob("*.so"))


def test_a_cache_that_cannot_be_written_is_a_failed_build(tmp_path, monkeypatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("RBFKM_CACHE_DIR", str(blocker / "cache"))  # under a file: no mkdir
    assert native.library.__wrapped__() is None


@pytest.mark.parametrize("value", ["0", "false", "No", "off"])
def test_switched_off(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native.SWITCH, value)
    assert not native.enabled()
    assert native.library.__wrapped__() is None


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("k", [1, 7, 8, 16, 29])
def test_row_minima_match_torch(dtype: torch.dtype, k: int) -> None:
    gen = torch.Generator().manual_seed(k)
    D = torch.randn(500, k, generator=gen, dtype=dtype)
    D[:50] = D[:50].round()  # ties
    offset = torch.rand(500, generator=gen, dtype=dtype) * 3
    fused = native.row_minima(D, offset, 0.5)
    assert fused is not None
    d_min, min_dist, labels, counts = fused
    torch.testing.assert_close(d_min, D.amin(dim=1))
    assert torch.equal(labels, D.argmin(dim=1))  # the lowest index on ties
    torch.testing.assert_close(min_dist, (D.amin(dim=1) + offset).clamp_min(0))
    assert counts is not None
    assert torch.equal(counts, (D < (D.amin(dim=1) + 0.5)[:, None]).sum(dim=1).int())
    # Rows apart by a stride (a block of a wider buffer) and no threshold.
    wide = torch.full((500, k + 5), float("nan"), dtype=dtype)
    wide[:, :k] = D
    d_min2, _, labels2, counts2 = native.row_minima(wide[:, :k], offset)
    assert torch.equal(labels2, labels) and torch.equal(d_min2, d_min) and counts2 is None


def run_soft_block(
    X: torch.Tensor, C: torch.Tensor, w: torch.Tensor, soft: native.SoftMap, direct: bool
) -> tuple[torch.Tensor, torch.Tensor, native.SoftParts]:
    """One soft block over all of X: its labels, distances and sums."""
    kernel = kernel_for(X.dtype)
    k = C.shape[0]
    centres = kernel.centres(C, passes.row_reduction_width(k, C.device), direct=direct)
    D = None
    if not direct:
        D = torch.full((X.shape[0], centres.width), float("inf"), dtype=X.dtype)
        torch.addmm(centres.c_sq[:k].unsqueeze(0), X, C.T, alpha=-2.0, out=D[:, :k])
    labels = torch.zeros(X.shape[0], dtype=torch.long)
    min_dist = torch.empty(X.shape[0], dtype=X.dtype)
    rows = native.Rows(X, X.square().sum(dim=1), w, labels, min_dist)
    sums = native.SoftParts.zeros(k, X.shape[1], spread=True)
    kernel.soft_block(rows, centres, D, soft, sums)
    return labels, min_dist, sums


@needs_compiler
@pytest.mark.parametrize("direct", [False, True])
def test_a_soft_block_matches_the_dense_map(direct: bool) -> None:
    from entmax import entmax15

    gen = torch.Generator().manual_seed(3)
    X = torch.randn(300, 5, generator=gen, dtype=torch.float64)
    C = torch.randn(11, 5, generator=gen, dtype=torch.float64)
    w = torch.rand(300, generator=gen, dtype=torch.float64)
    sigma = 0.7
    labels, min_dist, sums = run_soft_block(X, C, w, native.SoftMap(sigma, None), direct)
    D = reference(X, C)
    R = entmax15(-D / sigma, dim=1)
    entropy = (4 / 3) * (1 - R.pow(1.5).sum(dim=1))
    Rw = R * w[:, None]
    assert torch.equal(labels, D.argmin(dim=1))
    torch.testing.assert_close(min_dist, D.amin(dim=1))
    torch.testing.assert_close(sums.num, Rw.T @ X)
    torch.testing.assert_close(sums.den, Rw.sum(dim=0))
    assert sums.spread is not None
    torch.testing.assert_close(sums.spread, (Rw * D).sum(dim=0))
    soft = R.max(dim=1).values < 1 - 1e-12
    energy = (R * D).sum(dim=1) - sigma * entropy
    expected = [(w * energy).sum(), (w * D.amin(dim=1)).sum(), (R > 0).sum(), soft.sum()]
    expected += [w[soft].sum(), w[soft].sum()]  # without twins every soft row is shared
    expected += [torch.tensor(0.0), torch.tensor(0.0)]  # no neighbour lists: no row listed
    torch.testing.assert_close(sums.stats, torch.stack(expected).double())
    assert 50 < int(soft.sum()) < 300


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("width", [1, 2, 7, 40, 100, 1000])
def test_entmax15_rows_match_the_entmax_package(dtype: torch.dtype, width: int) -> None:
    from entmax import entmax15

    gen = torch.Generator().manual_seed(width)
    z = (torch.randn(400, width, generator=gen, dtype=dtype) * 3).clamp_min(-4.0)
    z[:40] = z[:40].round()  # ties
    z[40:80] = -4.0  # every score at the floor: a uniform row
    if width > 1:
        z[80:120, 1:] = -4.0  # one score above the floor: one-hot
    z[120:200] /= 40  # scores close together: wide supports, many rounds of the search
    z[200:240] = z[200:240].sort(dim=1).values / 40  # and in order
    q = torch.empty_like(z)
    spent, tsallis = torch.empty(400, dtype=dtype), torch.empty(400, dtype=dtype)
    support = torch.empty(400, dtype=torch.int32)
    assert native.entmax15_rows(z, 0.25, q, spent, tsallis, support)
    ref = entmax15(z, dim=-1)
    tol = {"atol": 1e-5, "rtol": 1e-4} if dtype == torch.float32 else {}
    torch.testing.assert_close(q, ref, **tol)
    torch.testing.assert_close(spent, (ref * z).sum(1) * -0.25, **tol)
    torch.testing.assert_close(tsallis, (4 / 3) * (1 - ref.pow(1.5).sum(1)), **tol)
    # Rows of tied scores may hold a score exactly at the threshold, which either side's
    # rounding puts just inside (q ~ 1e-16) or outside the support.
    assert torch.equal(support[40:], (ref[40:] > 0).sum(1).int())
    # In place: q may be the scores themselves.
    z2 = z.clone()
    assert native.entmax15_rows(z2, 0.25, z2, spent, tsallis, support)
    torch.testing.assert_close(z2, ref, **tol)


def hartigan_sweep_reference(
    X: np.ndarray, w: np.ndarray, labels: np.ndarray, k: int
) -> tuple[np.ndarray, float]:
    """One sweep of Hartigan's method, point by point in float64, from the clusters of
    ``labels`` (moved in place); returns the means after it and the inertia it saved."""
    mass = np.bincount(labels, weights=w, minlength=k)
    means = np.stack([np.average(X[labels == c], axis=0, weights=w[labels == c]) for c in range(k)])
    saved = 0.0
    for i, (x, wi) in enumerate(zip(X, w, strict=True)):
        a = labels[i]
        if not mass[a] - wi > 0:
            continue
        gaps = ((means - x) ** 2).sum(axis=1)
        leave = gaps[a] * mass[a] / (mass[a] - wi)
        costs = gaps * mass / (mass + wi)
        costs[a] = np.inf
        b = int(np.argmin(costs))
        if costs[b] < leave * (1 - 1e-6):
            means[a] += (means[a] - x) * wi / (mass[a] - wi)
            means[b] += (x - means[b]) * wi / (mass[b] + wi)
            mass[a] -= wi
            mass[b] += wi
            labels[i] = b
            saved += wi * (leave - costs[b])
    return means, saved


def sweep_state(X: torch.Tensor, w: torch.Tensor, labels: torch.Tensor, k: int):
    """The kernel's sweep state for ``labels``: exact means and masses, no bounds."""
    Xd, wd = X.double(), w.double()
    mass = torch.zeros(k, dtype=torch.float64).index_add_(0, labels, wd)
    means = torch.zeros(k, X.shape[1], dtype=torch.float64).index_add_(0, labels, Xd * wd[:, None])
    lower = torch.zeros(X.shape[0], dtype=torch.float64)
    return native.HartiganState(labels.clone(), means / mass[:, None], mass, lower)


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("d", [2, 13])
@pytest.mark.parametrize("weighted", [False, True])
def test_a_hartigan_sweep_moves_the_points_one_at_a_time(
    dtype: torch.dtype, d: int, weighted: bool
) -> None:
    # Labels from the nearest of random centres (a Lloyd step, not a Hartigan fixed point):
    # the sweep moves the points that pay, in row order, each after the means followed the
    # moves before it, and saves exactly the inertia it says.
    gen = torch.Generator().manual_seed(d)
    n, k = 300, 6
    X = torch.randn(n, d, generator=gen, dtype=dtype)
    w = torch.rand(n, generator=gen, dtype=dtype) + 0.5 if weighted else torch.ones(n, dtype=dtype)
    C = X[torch.randperm(n, generator=gen)[:k]]
    labels = reference(X, C).argmin(dim=1)
    state = sweep_state(X, w, labels, k)
    kernel = kernel_for(dtype)
    moves, gain = kernel.hartigan_sweep(X, w if weighted else None, state, slice(0, n), 1e-6)
    Xn, wn = X.double().numpy(), w.double().numpy()
    expected = labels.numpy().copy()
    means, saved = hartigan_sweep_reference(Xn, wn, expected, k)
    assert moves > 0 and moves == int((expected != labels.numpy()).sum())
    np.testing.assert_array_equal(state.labels.numpy(), expected)
    np.testing.assert_allclose(state.means.numpy(), means, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(state.mass.numpy(), np.bincount(expected, wn, k), rtol=1e-12)
    before, after = sse(Xn, labels.numpy(), wn, k), sse(Xn, expected, wn, k)
    assert gain == pytest.approx(saved, rel=1e-9) and after == pytest.approx(before - saved)


@needs_compiler
def test_a_hartigan_sweep_keeps_every_cluster() -> None:
    # A point alone in its cluster stays, however far; an empty cluster takes no one.
    X = torch.tensor([[0.0], [0.1], [0.2], [50.0], [0.05]], dtype=torch.float64)
    labels = torch.tensor([0, 0, 0, 1, 0])
    state = sweep_state(X, torch.ones(5, dtype=torch.float64), labels, 2)
    state.means = torch.cat([state.means, torch.zeros(1, 1, dtype=torch.float64)])
    state.mass = torch.cat([state.mass, torch.zeros(1, dtype=torch.float64)])
    assert kernel_for(torch.float64).hartigan_sweep(X, None, state, slice(0, 5), 1e-6) == (0, 0.0)
    assert state.labels.tolist() == [0, 0, 0, 1, 0] and state.mass.tolist() == [4.0, 1.0, 0.0]


def neighbour_lists(kernel: native.LloydKernel, C: torch.Tensor, width: int) -> native.Neighbours:
    k, d = C.shape
    centres = kernel.centres(C, passes.row_reduction_width(k, C.device), direct=True)
    into = native.Neighbours.empty(k, d, width, C.dtype)
    kernel.neighbours(centres, k, into, slice(0, k // 2))  # two spans
    kernel.neighbours(centres, k, into, slice(k // 2, k))
    return into


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("k", [5, 33, 300])
def test_neighbour_lists_are_each_centres_nearest_others(dtype: torch.dtype, k: int) -> None:
    gen = torch.Generator().manual_seed(k)
    C = torch.randn(k, 3, generator=gen, dtype=torch.float64).to(dtype)
    kernel, width = kernel_for(dtype), 16
    lists = neighbour_lists(kernel, C, width)
    D = torch.cdist(C.double(), C.double()).fill_diagonal_(float("inf"))
    held = min(width, k - 1)
    gaps, order = torch.topk(D, held, dim=1, largest=False)
    torch.testing.assert_close(lists.gap[:, :held].double(), gaps, rtol=1e-5, atol=1e-6)
    assert (lists.order[:, :held].long() == order).float().mean() > 0.99  # but near-ties
    assert (lists.order[:, held:] == -1).all() and lists.gap[:, held:].isinf().all()
    # Each list's vectors: c_sq, then the columns of -2 C^T, of the centres it names.
    named = lists.order[:, :held].long()
    torch.testing.assert_close(lists.lists[:, 0, :held], C.square().sum(dim=1)[named])
    torch.testing.assert_close(lists.lists[:, 1:, :held], -2 * C[named].transpose(1, 2))


def refreshed_lists(
    kernel: native.LloydKernel,
    last: native.Neighbours,
    before: torch.Tensor,
    after: torch.Tensor,
    movers: int,
    keep: int = 8,
) -> tuple[native.Neighbours, int]:
    """The lists at ``after`` kept up from ``last`` (made at ``before``), two spans; and
    how many were made exact."""
    k, d = after.shape
    centres = kernel.centres(after, passes.row_reduction_width(k, after.device), direct=True)
    into = native.Neighbours.empty(k, d, last.width, after.dtype)
    moves = native.NeighbourMoves.between(before, after, movers)
    trace = last.trace(before)
    exact = sum(
        kernel.refresh_neighbours(centres, k, into, span, trace, moves, keep)
        for span in (slice(0, k // 2), slice(k // 2, k))
    )
    return into, exact


def assert_lists_bound_every_gap(lists: native.Neighbours, C: torch.Tensor) -> None:
    """What a row's scan needs of a list: the centres it names with their exact gaps (up
    to rounding) where below the tail, and each gap at most that of every centre listed
    after it or not listed at all."""
    D = torch.cdist(C.double(), C.double()).fill_diagonal_(float("inf"))
    named = lists.order.long()
    gap = lists.gap.double()
    assert (named >= 0).all() and (gap[:, 1:] >= gap[:, :-1]).all()
    true_listed = D.gather(1, named)
    assert (gap <= true_listed * (1 + 1e-5) + 1e-6).all()
    exact = gap < gap[:, -1:]
    torch.testing.assert_close(gap[exact], true_listed[exact], rtol=1e-5, atol=1e-6)
    outside = D.clone().scatter_(1, named, float("inf")).amin(dim=1)
    assert (gap[:, -1] <= outside * (1 + 1e-5) + 1e-6).all()
    # Each list's vectors are those of the centres it names.
    torch.testing.assert_close(lists.lists[:, 0], C.square().sum(dim=1)[named])
    torch.testing.assert_close(lists.lists[:, 1:], -2 * C[named].transpose(1, 2))


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lists_kept_up_through_small_moves_bound_every_gap(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    k, width = 400, 16
    C = torch.randn(k, 3, generator=gen, dtype=torch.float64).to(dtype)
    kernel = kernel_for(dtype)
    lists = neighbour_lists(kernel, C, width)
    for step in range(6):  # several in a row: each keeps up the last
        moved = C + 0.002 * torch.randn(k, 3, generator=gen, dtype=torch.float64).to(dtype)
        # a few centres jump far: the movers, which must reach the lists they land in
        jumpers = torch.randint(k, (3,), generator=gen)
        moved[jumpers] = C[(jumpers + 7) % k] + 1e-3
        lists, exact = refreshed_lists(kernel, lists, C, moved, movers=k // 16)
        assert_lists_bound_every_gap(lists, moved)
        assert exact < k // 2, step  # most lists kept up, not made again
        for j in jumpers.tolist():  # a jumper sits next to a centre: it is in its list
            assert j in lists.order[(j + 7) % k].tolist() or j == (j + 7) % k
        C = moved


@needs_compiler
def test_lists_are_made_again_where_the_moves_leave_no_bound() -> None:
    gen = torch.Generator().manual_seed(1)
    k, width = 300, 16
    C = torch.randn(k, 3, generator=gen, dtype=torch.float64)
    kernel = kernel_for(torch.float64)
    lists = neighbour_lists(kernel, C, width)
    # Every centre moves about as far as its neighbours lie: no list can be kept up.
    moved = C + 0.5 * torch.randn(k, 3, generator=gen, dtype=torch.float64)
    kept, exact = refreshed_lists(kernel, lists, C, moved, movers=8)
    assert exact > 0.9 * k
    fresh = neighbour_lists(kernel, moved, width)
    made = kept.gap[:, -1] == fresh.gap[:, -1]
    assert made.sum() >= exact
    assert torch.equal(kept.order[made], fresh.order[made])
    assert_lists_bound_every_gap(kept, moved)
    # No move at all: every list is kept, the same lists, their gaps exact but the last,
    # lowered by a rounding allowance.
    same, exact = refreshed_lists(kernel, fresh, moved, moved.clone(), movers=8)
    assert exact == 0
    assert torch.equal(same.order, fresh.order)
    assert torch.equal(same.gap[:, :-1], fresh.gap[:, :-1])
    torch.testing.assert_close(same.gap[:, -1], fresh.gap[:, -1], rtol=1e-14, atol=0)
    assert (same.gap[:, -1] < fresh.gap[:, -1]).all()


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
