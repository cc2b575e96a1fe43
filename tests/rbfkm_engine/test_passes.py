"""The blocked E/M passes: warm hard passes keep exact sums, soft passes equal a dense
reference, blocks do not change the answer, and the workspace's labels are those of the
last pass (or of a restored snapshot)."""

from __future__ import annotations

import math
import os
import shutil

import numpy as np
import pytest
import torch
from entmax import entmax15

from rbfkm_engine import RBFKMeans, memory, native, passes
from rbfkm_engine.parallel import BlockPool
from rbfkm_engine.passes import ROW_REDUCTION_WIDTH, Workspace, row_reduction_width
from rbfkm_engine.progress import FitInterrupted, IterationStats

from .conftest import blob_tensor, workspace_on

needs_compiler = pytest.mark.skipif(
    shutil.which(os.environ.get("CC", "cc")) is None, reason="needs a C compiler"
)

BLOBS = [[-5.0, 0.0, 0.0], [5.0, 0.0, 1.0], [0.0, 6.0, -1.0], [0.0, -6.0, 0.0], [3.0, 3.0, 3.0]]


def data() -> torch.Tensor:
    return blob_tensor(BLOBS, n_per=80, spread=1.5, seed=5)


def bad_centres(X: torch.Tensor, k: int = 5) -> torch.Tensor:
    """Centres of the first blob's points: Lloyd moves many labels from them."""
    return X[:k].clone()


def weights(n: int) -> torch.Tensor:
    w = torch.rand(n, generator=torch.Generator().manual_seed(6), dtype=torch.float64) + 0.5
    w[::5] = 0.0
    return w


def reference(
    X: torch.Tensor, C: torch.Tensor, w: torch.Tensor | None, sigma: float, assignment: str
) -> dict[str, torch.Tensor | float]:
    """A dense pass: every quantity from the whole ``(n, k)`` distance matrix."""
    D = torch.cdist(X, C) ** 2
    wv = torch.ones(X.shape[0], dtype=X.dtype) if w is None else w
    if assignment == "softmax":
        R = torch.softmax(-D / sigma, dim=1)
        entropy = -(R * torch.log(R.clamp_min(1e-300))).sum(dim=1)
    elif assignment == "entmax15":
        R = entmax15(-D / sigma, dim=1)
        entropy = (4.0 / 3.0) * (1.0 - R.pow(1.5).sum(dim=1))
    else:
        R = torch.nn.functional.one_hot(D.argmin(dim=1), C.shape[0]).to(X.dtype)
        entropy = torch.zeros(X.shape[0], dtype=X.dtype)
    Rw = R * wv.unsqueeze(1)
    soft = (R > 0).sum(dim=1) > 1
    return {
        "num": Rw.T @ X,
        "den": Rw.sum(dim=0),
        "spread": (Rw * D).sum(dim=0),
        "objective": float((wv * ((R * D).sum(dim=1) - sigma * entropy)).sum()),
        "inertia": float((wv * D.min(dim=1).values).sum()),
        "nnz": float((R > 0).sum()) / X.shape[0],
        "n_soft": int(soft.sum()),
        "soft_weight": float(wv[soft].sum()),
        "labels": D.argmin(dim=1),
    }


# ------------------------------------------------------------------ hard passes


@pytest.mark.parametrize("weighted", (False, True))
def test_a_warm_hard_pass_equals_a_cold_one_after_labels_moved(weighted: bool) -> None:
    X = data()
    w = weights(X.shape[0]) if weighted else None
    ws = Workspace(X, w, 5, chunk_size=64)
    C = bad_centres(X)
    num, den, _ = ws.step(C, 0.0, "hard")
    moved = 0
    for _ in range(4):
        before = ws.labels.clone()
        C, _ = ws.update(C, num, den)
        num, den, stats = ws.step(C, 0.0, "hard", warm=True)
        moved += int((ws.labels != before).sum())
        cold = Workspace(X, w, 5, chunk_size=64)
        num_c, den_c, stats_c = cold.step(C, 0.0, "hard")
        torch.testing.assert_close(ws.labels, cold.labels)
        torch.testing.assert_close(num, num_c, rtol=1e-12, atol=1e-9)
        torch.testing.assert_close(den, den_c, rtol=1e-12, atol=1e-9)
        assert stats.inertia == pytest.approx(stats_c.inertia, rel=1e-12)
    assert moved > 20  # the kept sums were corrected for many moved points


@pytest.mark.parametrize("between", ("soft step", "hard_labels", "two_nearest", "restore"))
def test_labels_written_another_way_drop_the_kept_sums(between: str) -> None:
    # A warm hard pass after any other writer of the labels still gives the cold sums.
    X = data()
    ws = Workspace(X, None, 5, chunk_size=64)
    C0 = bad_centres(X)
    num, den, _ = ws.step(C0, 0.0, "hard")
    saved = ws.snapshot()
    elsewhere = X[[0, 80, 160, 240, 320]]
    if between == "soft step":
        ws.step(elsewhere, 2.0, "softmax")
    elif between == "hard_labels":
        ws.hard_labels(elsewhere)
    elif between == "two_nearest":
        ws.two_nearest(elsewhere)
    else:
        ws.hard_labels(elsewhere)
        ws.step(elsewhere, 0.0, "hard", warm=True)  # sums kept for ``elsewhere``'s labels
        ws.restore(saved)
    assert torch.equal(ws.labels, saved.labels) is (between == "restore")
    assert bool((den > 0).all())
    C1 = num / den.unsqueeze(1)  # the M-step of the pass at C0
    num1, den1, _ = ws.step(C1, 0.0, "hard", warm=True)
    expected = reference(X, C1, None, 0.0, "hard")
    torch.testing.assert_close(ws.labels, expected["labels"])
    torch.testing.assert_close(num1, expected["num"], rtol=1e-12, atol=1e-9)
    torch.testing.assert_close(den1, expected["den"], rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("weighted", (False, True))
def test_whole_hard_passes_equal_blocked_ones(weighted: bool) -> None:
    # The GPUs' hard passes (every row at once, no hints) give the CPUs' labels and sums.
    X = data()
    w = weights(X.shape[0]) if weighted else None
    blocked, whole = Workspace(X, w, 5, chunk_size=64), Workspace(X, w, 5, chunk_size=64)
    whole.whole_passes = True
    C = bad_centres(X)
    for warm in (False, True, True, True):
        num_b, den_b, stats_b = blocked.step(C, 0.0, "hard", warm=warm)
        num_w, den_w, stats_w = whole.step(C, 0.0, "hard", warm=warm)
        torch.testing.assert_close(whole.labels, blocked.labels)
        torch.testing.assert_close(whole.min_dist, blocked.min_dist)
        torch.testing.assert_close(num_w, num_b, rtol=1e-12, atol=1e-9)
        torch.testing.assert_close(den_w, den_b, rtol=1e-12, atol=1e-9)
        assert stats_w.inertia == pytest.approx(stats_b.inertia, rel=1e-12)
        C, _ = blocked.update(C, num_b, den_b)
    assert whole.hard_labels(C) == pytest.approx(blocked.hard_labels(C), rel=1e-12)
    torch.testing.assert_close(whole.labels, blocked.labels)


def test_a_hard_pass_equals_the_dense_reference() -> None:
    X = data()
    w = weights(X.shape[0])
    ws = Workspace(X, w, 5, chunk_size=64)
    C = bad_centres(X)
    num, den, stats = ws.step(C, 0.0, "hard")
    expected = reference(X, C, w, 0.0, "hard")
    torch.testing.assert_close(ws.labels, expected["labels"])
    torch.testing.assert_close(ws.min_dist, torch.cdist(X, C).min(dim=1).values ** 2)
    torch.testing.assert_close(num, expected["num"])
    torch.testing.assert_close(den, expected["den"])
    assert stats.inertia == pytest.approx(expected["inertia"], rel=1e-12)
    assert stats.objective == stats.inertia
    assert (stats.mean_nnz, stats.n_soft, stats.soft_weight) == (1.0, 0, 0.0)
    assert ws.hard_labels(C) == pytest.approx(expected["inertia"], rel=1e-12)


def test_padded_hard_block_after_a_soft_pass_in_the_same_buffer() -> None:
    # k = 5: hard passes use 16-column blocks whose padding is +inf; a soft pass writes its
    # responsibilities over that buffer, and the next hard pass must pad it again.
    X = torch.randn((6000, 3), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    C = X[:5].clone()
    expected = torch.cdist(X, C).argmin(dim=1)
    fp = Workspace(X, None, 5, chunk_size=1024)
    fp.hard_labels(C)
    torch.testing.assert_close(fp.labels, expected)
    fp.step(C, 1.0, "softmax")
    fp.hard_labels(C)
    torch.testing.assert_close(fp.labels, expected)
    fp.step(C, 0.0, "hard", warm=True)
    torch.testing.assert_close(fp.labels, expected)


@pytest.mark.parametrize(("k", "width"), [(1, 16), (5, 16), (16, 16), (17, 32), (40, 48)])
def test_row_reduction_width(k: int, width: int) -> None:
    assert row_reduction_width(k, torch.device("cpu")) == width
    assert width % ROW_REDUCTION_WIDTH == 0
    assert row_reduction_width(k, torch.device("cuda", 0)) == k


# ------------------------------------------------------------------ soft passes


@pytest.mark.parametrize(("assignment", "sigma"), [("softmax", 3.0), ("entmax15", 3.0)])
@pytest.mark.parametrize("weighted", (False, True))
@pytest.mark.parametrize("need_spread", (False, True))
@pytest.mark.parametrize("in_kernel", (False, True))
def test_a_soft_pass_equals_the_dense_reference(
    assignment: str, sigma: float, weighted: bool, need_spread: bool, in_kernel: bool
) -> None:
    X = data()
    w = weights(X.shape[0]) if weighted else None
    C = X[[0, 80, 160, 240, 320]] + 0.5
    ws = workspace_on("kernel" if in_kernel else "torch", X, w, 5, chunk_size=64)
    num, den, stats = ws.step(C, sigma, assignment, need_spread=need_spread)
    expected = reference(X, C, w, sigma, assignment)
    torch.testing.assert_close(num, expected["num"], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(den, expected["den"], rtol=1e-10, atol=1e-10)
    assert stats.objective == pytest.approx(expected["objective"], rel=1e-10)
    assert stats.inertia == pytest.approx(expected["inertia"], rel=1e-10)
    torch.testing.assert_close(ws.labels, expected["labels"])
    spread = expected["spread"] if need_spread else torch.zeros(5, dtype=X.dtype)
    torch.testing.assert_close(stats.spread, spread, rtol=1e-9, atol=1e-9)
    assert expected["n_soft"] > 0
    if assignment == "entmax15":  # softmax's tails underflow only far out: no exact count
        assert stats.mean_nnz == pytest.approx(expected["nnz"])
        assert stats.n_soft == expected["n_soft"]
        assert stats.soft_weight == pytest.approx(expected["soft_weight"])


def test_twins_fold_into_their_centres_nonzero_count() -> None:
    X = data()
    C = X[[0, 80, 160]] + 0.5
    full = torch.cat([C, C + 1e-3])
    ws = Workspace(X, None, 3, chunk_size=64)
    _, _, plain = ws.step(full, 3.0, "entmax15")
    _, _, folded = ws.step(full, 3.0, "entmax15", twins_from=3)
    R = entmax15(-(torch.cdist(X, full) ** 2) / 3.0, dim=1)
    assert plain.mean_nnz == pytest.approx(float((R > 0).sum()) / X.shape[0])
    assert folded.mean_nnz == pytest.approx(float(((R[:, :3] + R[:, 3:]) > 0).sum()) / 400)
    assert folded.mean_nnz < plain.mean_nnz


@pytest.mark.parametrize(
    ("path", "assignment", "sigma"),
    [
        ("kernel", "entmax15", 0.3),
        ("kernel", "entmax15", 3.0),
        ("torch", "entmax15", 0.3),
        ("torch", "entmax15", 3.0),
        ("torch", "softmax", 0.3),
    ],
)
@pytest.mark.parametrize("weighted", [False, True])
def test_a_row_shared_with_its_twin_alone_counts_as_not_shared(
    path: str, assignment: str, sigma: float, weighted: bool
) -> None:
    # Twelve centres on a grid, each with a twin close by: most rows are shared by a
    # centre and its twin alone, those near a boundary by two centres. At sigma 0.3 the
    # soft rows' supports are narrow (the torch pass packs them), at 3.0 wide.
    gen = torch.Generator().manual_seed(9)
    grid = torch.tensor([[float(i), float(j)] for i in range(4) for j in range(3)]) * 4.0
    X = (grid.repeat(40, 1) + 0.8 * torch.randn(480, 2, generator=gen)).double()
    w = weights(X.shape[0]) if weighted else None
    full = torch.cat([grid, grid + 0.05]).double()
    ws = workspace_on(path, X, w, 12, chunk_size=64)
    _, _, shared = ws.step(full, sigma, assignment, twins_from=12)
    _, _, plain = ws.step(full, sigma, assignment)
    D = torch.cdist(X, full) ** 2
    R = entmax15(-D / sigma, dim=1) if assignment == "entmax15" else torch.softmax(-D / sigma, 1)
    folded = R[:, :12] + R[:, 12:]
    if assignment == "entmax15":
        soft = (folded > 0).sum(dim=1) > 1
    else:
        soft = -torch.log(folded.max(dim=1).values) > 1e-6
    wv = torch.ones(X.shape[0], dtype=X.dtype) if w is None else w
    expected = float(wv[soft].sum())
    assert 0 < expected < plain.soft_weight
    assert shared.shared_weight == pytest.approx(expected)
    # The rows that are not one-hot are those of the plain pass; without twins every soft
    # row is shared.
    assert (shared.n_soft, shared.soft_weight) == (plain.n_soft, plain.soft_weight)
    assert plain.shared_weight == plain.soft_weight


def soft_pass(
    X: torch.Tensor,
    w: torch.Tensor | None,
    C: torch.Tensor,
    sigma: float,
    assignment: str,
    in_kernel: bool,
    chunk_size: int = 4096,
    twins_from: int | None = None,
) -> tuple[Workspace, torch.Tensor, torch.Tensor, IterationStats]:
    """One soft pass (with the spread) in the kernel or in torch ops."""
    ws = Workspace(X, w, C.shape[0], chunk_size)
    assert ws.kernel is not None
    if not in_kernel:
        ws.kernel = None
    num, den, stats = ws.step(C, sigma, assignment, need_spread=True, twins_from=twins_from)
    return ws, num, den, stats


def median_gap(X: torch.Tensor, C: torch.Tensor) -> float:
    """The median gap between the rows' two nearest squared distances: at that
    temperature about half the rows are soft."""
    two = torch.topk(torch.cdist(X.double(), C.double()).square(), 2, largest=False).values
    return float((two[:, 1] - two[:, 0]).median())


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("assignment", ["entmax15", "softmax"])
@pytest.mark.parametrize("d", [3, 40])
@pytest.mark.parametrize("weighted", [False, True])
def test_a_soft_pass_in_the_kernel_equals_the_torch_pass(
    dtype: torch.dtype, assignment: str, d: int, weighted: bool, monkeypatch
) -> None:
    # Not small: 40 features take their distances from the block's GEMM. Softmax passes
    # stay in torch.
    monkeypatch.setattr(passes, "KERNEL_ITERATION_MAX_WORK", 0)
    calls = []
    soft_block = native.LloydKernel.soft_block
    monkeypatch.setattr(
        native.LloydKernel, "soft_block", lambda *a: calls.append(1) or soft_block(*a)
    )
    gen = torch.Generator().manual_seed(d)
    X = torch.randn(700, d, generator=gen, dtype=dtype)
    w = weights(700).to(dtype) if weighted else None
    C = X[:9] + 0.1 * torch.randn(9, d, generator=gen, dtype=dtype)
    sigma = median_gap(X, C)
    rtol = 1e-4 if dtype == torch.float32 else 1e-10
    for chunk_size in (4096, 64):
        ws1, num1, den1, stats1 = soft_pass(X, w, C, sigma, assignment, True, chunk_size)
        ws2, num2, den2, stats2 = soft_pass(X, w, C, sigma, assignment, False, chunk_size)
        assert torch.equal(ws1.labels, ws2.labels)
        torch.testing.assert_close(ws1.min_dist, ws2.min_dist, rtol=rtol, atol=rtol)
        for a, b in ((num1, num2), (den1, den2), (stats1.spread, stats2.spread)):
            assert a.dtype == dtype
            torch.testing.assert_close(a, b, rtol=rtol, atol=rtol * float(b.abs().max()))
        assert stats1.objective == pytest.approx(stats2.objective, rel=rtol)
        assert stats1.inertia == pytest.approx(stats2.inertia, rel=rtol)
        assert stats1.n_soft == stats2.n_soft > 100
        assert stats1.soft_weight == pytest.approx(stats2.soft_weight, rel=rtol)
        assert stats1.mean_nnz == pytest.approx(stats2.mean_nnz, rel=1e-3)
    assert len(calls) == (0 if assignment == "softmax" else 1 + math.ceil(700 / 64))


@needs_compiler
def test_the_kernel_folds_twins_into_their_centres_nonzero_count() -> None:
    X = data().float()
    C = X[[0, 80, 160]] + 0.5
    full = torch.cat([C, C + 1e-2])
    counts = []
    for in_kernel in (True, False):
        for twins_from in (None, 3):
            _, _, _, stats = soft_pass(X, None, full, 3.0, "entmax15", in_kernel, 64, twins_from)
            counts.append(stats.mean_nnz)
    assert counts[:2] == pytest.approx(counts[2:])
    assert counts[1] < counts[0]


def listed_rows(ws: Workspace) -> list[int]:
    """The rows each of ``ws``'s entmax15 passes with neighbour lists served from them,
    filled in as the passes run."""
    served: list[int] = []
    record = ws._soft_neighbour_use.record

    def counted(k: int, rows: int, decided: int, scanned: int, made: int) -> None:
        served.append(decided)
        record(k, rows, decided, scanned, made=made)

    ws._soft_neighbour_use.record = counted  # type: ignore[method-assign]
    return served


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_entmax15_passes_from_neighbour_lists_are_those_of_every_centre(
    dtype: torch.dtype,
) -> None:
    """Soft passes whose rows take their candidates from their last centre's neighbour
    list give the labels, distances, sums and statistics of passes that scan every
    centre, bit for bit, through cooling temperatures and moving centres with twins; and
    the lists serve most rows once the map is nearly hard."""
    gen = torch.Generator().manual_seed(6)
    X = (torch.randn(20_000, 3, generator=gen, dtype=torch.float64) ** 3).to(dtype)
    k = 400
    C = X[:k] + 0.01 * torch.randn(k, 3, generator=gen, dtype=torch.float64).to(dtype)
    runs = {}
    for lists in (True, False):
        ws = Workspace(X, None, k, 2048)
        served = listed_rows(ws)
        if not lists:
            ws._soft_neighbour_use.wanted = lambda: False  # type: ignore[method-assign]
        seen, centres = [], C.clone()
        for sigma in (1.0, 0.1, 1e-2, 1e-3, 1e-4, 1e-5):
            num, den, stats = ws.step(centres, sigma, "entmax15", need_spread=True, twins_from=200)
            seen.append((num, den, stats, ws.labels.clone(), ws.min_dist.clone()))
            centres, _ = ws.update(centres, num, den, reseed=False)
        runs[lists] = (seen, served)
    (listed, served), (scanned, none) = runs[True], runs[False]
    assert none == [] and served[-1] > 0.9 * X.shape[0]
    for one, other in zip(listed, scanned, strict=True):
        (num, den, stats, labels, dist), (num2, den2, stats2, labels2, dist2) = one, other
        for a, b in ((num, num2), (den, den2), (labels, labels2), (dist, dist2)):
            assert torch.equal(a, b)
        assert torch.equal(stats.spread, stats2.spread)
        assert (stats.objective, stats.inertia, stats.mean_nnz, stats.n_soft) == (
            stats2.objective,
            stats2.inertia,
            stats2.mean_nnz,
            stats2.n_soft,
        )
        assert (stats.soft_weight, stats.shared_weight) == (
            stats2.soft_weight,
            stats2.shared_weight,
        )


def test_labels_follow_their_centres() -> None:
    X = data()
    ws = Workspace(X, None, 3, 64)
    ws.labels.copy_(torch.arange(X.shape[0]) % 4)
    ws.follow(torch.tensor([2, 0, 0, 1]))
    assert torch.equal(
        ws.labels, torch.tensor([2, 0, 0, 1]).repeat(X.shape[0] // 4 + 1)[: X.shape[0]]
    )


# ------------------------------------------------------------------ blocks


@pytest.mark.parametrize(
    ("assignment", "sigma"), [("hard", 0.0), ("softmax", 3.0), ("entmax15", 3.0)]
)
def test_chunk_size_does_not_change_a_pass(assignment: str, sigma: float) -> None:
    X = data()
    w = weights(X.shape[0])
    C = X[[0, 80, 160, 240, 320]] + 0.5
    results = []
    for chunk_size in (1000, 64, 7):
        ws = Workspace(X, w, 5, chunk_size)
        num, den, stats = ws.step(C, sigma, assignment, need_spread=assignment != "hard")
        results.append((ws.labels.clone(), num, den, stats, ws.hard_labels(C)))
    labels, num, den, stats, inertia = results[0]
    for labels_b, num_b, den_b, stats_b, inertia_b in results[1:]:
        torch.testing.assert_close(labels_b, labels, rtol=0, atol=0)
        torch.testing.assert_close(num_b, num, rtol=1e-12, atol=1e-10)
        torch.testing.assert_close(den_b, den, rtol=1e-12, atol=1e-10)
        assert stats_b.objective == pytest.approx(stats.objective, rel=1e-12)
        assert stats_b.inertia == pytest.approx(stats.inertia, rel=1e-12)
        assert inertia_b == pytest.approx(inertia, rel=1e-12)
    assert [len(list(Workspace(X, w, 5, c).chunks())) for c in (1000, 64, 7)] == [
        1,
        math.ceil(400 / 64),
        math.ceil(400 / 7),
    ]


# ------------------------------------------------------------------ labels and centres


def test_snapshot_and_restore() -> None:
    X = data()
    ws = Workspace(X, None, 5, chunk_size=64)
    C1, C2 = bad_centres(X), X[[0, 80, 160, 240, 320]]
    ws.hard_labels(C1)
    saved = ws.snapshot()
    labels, min_dist = ws.labels.clone(), ws.min_dist.clone()
    ws.hard_labels(C2)
    assert not torch.equal(ws.labels, labels)
    torch.testing.assert_close(saved.labels, labels)  # a copy, not a view
    ws.restore(saved)
    torch.testing.assert_close(ws.labels, labels, rtol=0, atol=0)
    torch.testing.assert_close(ws.min_dist, min_dist, rtol=0, atol=0)


@pytest.mark.parametrize("path", ("kernel", "torch"))
@pytest.mark.parametrize("d", (3, 40))  # the kernel's direct distances, or a GEMM's
@pytest.mark.parametrize("dtype", (torch.float32, torch.float64))
def test_two_nearest(path: str, d: int, dtype: torch.dtype) -> None:
    X = data()
    X = torch.cat([X, torch.sin(X @ torch.ones(3, d - 3, dtype=X.dtype))], dim=1).to(dtype)
    ws = workspace_on(path, X, weights(X.shape[0]).to(dtype), 5, chunk_size=64)
    C = X[[0, 80, 160, 240, 320, 80, 7, 9, 11, 13, 15]]  # centre 5 is centre 1's twin
    second, inertia = ws.two_nearest(C)
    D = torch.cdist(X.double(), C.double()) ** 2
    values, order = D.sort(dim=1, stable=True)
    tol = {"rtol": 1e-10, "atol": 1e-10} if dtype == torch.float64 else {"rtol": 0, "atol": 1e-3}
    torch.testing.assert_close(ws.labels, order[:, 0])
    torch.testing.assert_close(ws.min_dist.double(), values[:, 0], **tol)
    torch.testing.assert_close(second.double(), values[:, 1], **tol)
    twinned = ws.labels == 1  # its twin, centre 5, is as near
    assert int(twinned.sum()) > 10
    torch.testing.assert_close(second[twinned], ws.min_dist[twinned], **tol)
    expected = float((ws.w.double() * ws.min_dist.double()).sum())
    assert inertia == pytest.approx(expected, rel=1e-12 if dtype == torch.float64 else 1e-6)


@pytest.mark.parametrize("d", (3, 40))
def test_two_nearest_takes_the_inertia_of_its_labels_in_float64(d: int) -> None:
    """By the kernel, from the labels' float64 sums: the rows' float32 distances carry
    rounding of about 1e-7 of ``||x||^2``, far above a tight fit's inertia, and the local
    search compares this inertia with a Lloyd iteration's (made from the sums)."""
    g = torch.Generator().manual_seed(0)
    means = 3 * torch.randn(8, d, generator=g, dtype=torch.float64)
    X = (means.repeat_interleave(50, 0) + 1e-3 * torch.randn(400, d, generator=g)).float()
    w = weights(400).float()
    ws = workspace_on("kernel", X, w, 8, chunk_size=64)
    C = X[1::50] + 1e-4
    _, inertia = ws.two_nearest(C)
    assert ws.labels.tolist() == torch.arange(8).repeat_interleave(50).tolist()
    exact = float((w.double() * (X.double() - C.double()[ws.labels]).square().sum(1)).sum())
    assert inertia == pytest.approx(exact, rel=1e-8)
    rows = float((w.double() * ws.min_dist.double()).sum())
    if d == 40:  # the GEMM's distances: the test would see a sum of them
        assert abs(rows / exact - 1) > 1e-6


def test_update_moves_an_empty_centre_to_the_farthest_point() -> None:
    X = data()
    ws = Workspace(X, None, 5, chunk_size=64)
    C = X[[0, 80, 160, 240]]
    C = torch.cat([C, torch.tensor([[1e3, 1e3, 1e3]], dtype=X.dtype)])  # gets no point
    num, den, _ = ws.step(C, 0.0, "hard")
    assert float(den[4]) == 0.0
    farthest = X[int(torch.argmax(ws.min_dist))]
    kept, n_kept = ws.update(C, num, den, reseed=False)
    torch.testing.assert_close(kept[4], C[4])
    assert n_kept == 0
    C_new, n_empty = ws.update(C, num, den)
    assert n_empty == 1
    torch.testing.assert_close(C_new[4], farthest)
    torch.testing.assert_close(C_new[:4], num[:4] / den[:4].unsqueeze(1))


def test_add_farthest() -> None:
    X = data()
    ws = Workspace(X, None, 5, chunk_size=64)
    C = X[:1].clone()
    assert ws.add_farthest(C, 0) is C
    grown = ws.add_farthest(C, 4)
    assert grown.shape == (5, 3)
    torch.testing.assert_close(grown[0], C[0])
    first = X[int(torch.argmax(torch.cdist(X, C).squeeze(1)))]
    torch.testing.assert_close(grown[1], first)
    # Each new centre is a point of X, each the farthest from those before it.
    for j in range(1, 5):
        d = torch.cdist(X, grown[:j]).min(dim=1).values
        torch.testing.assert_close(grown[j], X[int(torch.argmax(d))])


def test_every_block_of_a_pass_is_checked_and_a_stop_ends_it() -> None:
    X = blob_tensor([[0.0, 0.0], [5.0, 5.0]], n_per=100)  # 200 rows: 4 blocks of 64
    calls: list[int] = []
    ws = Workspace(X, None, 2, 64, check=lambda: calls.append(1))
    ws.hard_labels(X[[0, 150]].clone())
    ws.step(X[[0, 150]].clone(), 1.0, "entmax15")
    assert len(calls) == 8

    def stop_at_the_second_block() -> None:
        calls.append(1)
        if len(calls) >= 2:
            raise FitInterrupted

    calls.clear()
    stopping = Workspace(X, None, 2, 64, check=stop_at_the_second_block)
    with pytest.raises(FitInterrupted):
        stopping.hard_labels(X[[0, 150]].clone())
    assert len(calls) == 2


def lloyd_iterations(
    X: torch.Tensor, w: torch.Tensor | None, C: torch.Tensor, how: str, monkeypatch
) -> tuple[torch.Tensor, Workspace, list[tuple[float, float]], list[str]]:
    """Six Lloyd iterations from ``C``: ``"whole"`` as one kernel block and the kernel's
    M-step, ``"blocks"`` as a blocked pass and the kernel's M-step, ``"torch"`` as a pass
    and :meth:`update`; the centres, the workspace, each iteration's (shift, inertia) and
    the kernel's M-step calls."""
    limit = passes.KERNEL_ITERATION_MAX_WORK if how == "whole" else 0
    monkeypatch.setattr(passes, "KERNEL_ITERATION_MAX_WORK", limit)
    if how == "torch":
        monkeypatch.setattr(Workspace, "_kernel_iteration", lambda self, C, warm: None)
    calls: list[str] = []
    update = native.LloydKernel.update

    def counted(*a, **kw):
        calls.append("update")
        return update(*a, **kw)

    monkeypatch.setattr(native.LloydKernel, "update", counted)
    ws = Workspace(X, w, C.shape[0], chunk_size=4096)
    assert ws.kernel is not None
    history = []
    for it in range(6):
        C, shift, stats = ws.lloyd_iteration(C, warm=it > 0)
        history.append((shift, stats.inertia))
    monkeypatch.undo()
    return C, ws, history, calls


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("d", [3, 40])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("how", ["whole", "blocks"])
def test_a_lloyd_iteration_in_the_kernel_equals_a_pass_and_an_update(
    dtype: torch.dtype, d: int, weighted: bool, how: str, monkeypatch
) -> None:
    gen = torch.Generator().manual_seed(d)
    X = torch.randn(600, d, generator=gen, dtype=dtype)
    w = weights(600).to(dtype) if weighted else None
    C0 = X[:7].clone()
    C1, ws1, history1, calls1 = lloyd_iterations(X, w, C0, how, monkeypatch)
    C2, ws2, history2, calls2 = lloyd_iterations(X, w, C0, "torch", monkeypatch)
    assert (calls1, calls2) == (["update"] * 6, [])
    assert torch.equal(ws1.labels, ws2.labels)
    # The same labels give the same float64 sums up to their grouping (a pass's moves are
    # added to the kept sums one by one, or summed per block first), so the same centres.
    torch.testing.assert_close(C1, C2, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ws1.min_dist, ws2.min_dist)
    for (shift1, inertia1), (shift2, inertia2) in zip(history1, history2, strict=True):
        assert shift1 == pytest.approx(shift2, rel=1e-5, abs=1e-12)
        assert inertia1 == pytest.approx(inertia2, rel=1e-6)


@needs_compiler
def test_a_kernel_iterations_inertia_is_exact_on_a_tight_fit() -> None:
    # Two tight clusters at +-10 (centred data, as a fit's are): float32 distances from the
    # expansion carry about eps * ||x||^2 = 1e-5 a row, more than this inertia's share of
    # a row (4e-6); the sums' float64 carries about 1e-16 * sum ||x||^2.
    gen = torch.Generator().manual_seed(4)
    X = torch.randn(500, 4, generator=gen) * 1e-3 + 5.0
    X[::2] -= 10.0
    C = torch.stack([X[0], X[1]])
    ws = Workspace(X, None, 2, chunk_size=4096)
    _, _, stats = ws.lloyd_iteration(C, warm=False)
    exact = float(((X.double() - C.double()[ws.labels]) ** 2).sum())
    assert stats.inertia == pytest.approx(exact, rel=1e-7)
    assert float(ws.min_dist.double().sum()) != pytest.approx(exact, rel=1e-3)  # the rows


@needs_compiler
@pytest.mark.parametrize("how", ["whole", "blocks"])
def test_a_kernel_iteration_reseeds_an_empty_cluster_as_update_does(how: str, monkeypatch) -> None:
    X = data()
    C0 = torch.cat([bad_centres(X, 4), torch.full((1, 3), 100.0)])  # the last one gets none
    C1, ws1, history1, calls1 = lloyd_iterations(X, None, C0, how, monkeypatch)
    C2, ws2, history2, _ = lloyd_iterations(X, None, C0, "torch", monkeypatch)
    assert len(calls1) == 6
    assert not bool((C1 == 100.0).any())  # re-seeded on the first iteration
    assert torch.equal(ws1.labels, ws2.labels)
    torch.testing.assert_close(C1, C2)
    assert [h[1] for h in history1] == pytest.approx([h[1] for h in history2], rel=1e-6)


SIX_POINTS = [[0.0, 0.1], [0.2, 0.0], [5.0, 5.1], [5.2, 4.9], [9.8, 0.1], [10.1, 0.0]]


@needs_compiler
@pytest.mark.parametrize(
    ("data", "k", "assignment"),
    [("normal", 8, "hard"), ("normal", 8, "entmax15"), ("six", 3, "entmax15")],
)
def test_a_small_fit_is_the_same_with_lloyd_in_the_kernel(
    data: str, k: int, assignment: str, monkeypatch
) -> None:
    # "six": the README's session, whose tight clusters once made the local search take
    # every trial for a gain of the kernel's rounding until its budget (600 iterations on
    # top of max_iter's 300) ran out; a fit that stops by its own tests takes far fewer.
    if data == "six":
        X = np.array(SIX_POINTS, dtype=np.float32)
    else:
        X = np.random.default_rng(3).normal(size=(400, 6)).astype(np.float32)
    fits = []
    for limit in (passes.KERNEL_ITERATION_MAX_WORK, 0):
        monkeypatch.setattr(passes, "KERNEL_ITERATION_MAX_WORK", limit)
        fits.append(RBFKMeans(k, assignment=assignment, random_state=0).fit(X))
    assert fits[0].n_iter_ == fits[1].n_iter_ < 150
    assert np.array_equal(fits[0].labels_, fits[1].labels_)
    np.testing.assert_allclose(fits[0].cluster_centers_, fits[1].cluster_centers_, rtol=1e-6)
    assert fits[0].inertia_ == pytest.approx(fits[1].inertia_, rel=1e-6)


@pytest.mark.parametrize("assignment", ("hard", "entmax15"))
def test_a_fits_inertia_is_that_of_its_clusters_to_float64_rounding(assignment: str) -> None:
    """The fit's inertia comes from the float64 sums of its last Lloyd pass, whatever
    passes came before (bounds or not, a local search's trials): summed from the rows'
    float32 distances, these tight clusters' inertia was off in its fifth digit."""
    X = np.array(SIX_POINTS, dtype=np.float32)
    fit = RBFKMeans(3, assignment=assignment, random_state=0).fit(X)
    Xd = X.astype(np.float64)
    exact = sum(
        float(((Xd[fit.labels_ == j] - Xd[fit.labels_ == j].mean(axis=0)) ** 2).sum())
        for j in range(3)
    )
    assert fit.inertia_ == pytest.approx(exact, rel=1e-6)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64))
@pytest.mark.parametrize("weighted", (False, True))
def test_the_weighted_sum_of_squares_is_the_same_in_the_kernel_and_in_torch(
    dtype: torch.dtype, weighted: bool
) -> None:
    # lloyd_update's inertia from the sums needs sum_i w_i ||x_i||^2 in float64.
    X = (data() * 1e3 + 1e4).to(dtype)  # float32 squares of these round at 1e-8 * 1e8
    w = weights(X.shape[0]).to(dtype) if weighted else None
    expected = (X.double().square().sum(dim=1) * (1.0 if w is None else w.double())).sum()
    found = {}
    for path in ("kernel", "torch"):
        ws = workspace_on(path, X, w, 5, chunk_size=64)  # several blocks
        found[path] = ws._weighted_sum_sq()
        assert found[path].dtype == torch.float64
    torch.testing.assert_close(found["kernel"], expected, rtol=1e-14, atol=0.0)
    torch.testing.assert_close(found["torch"], expected, rtol=1e-14, atol=0.0)


def test_neighbour_lists_pause_while_they_do_not_pay() -> None:
    use = passes.NeighbourUse()
    k = 1000
    scan = k * k  # lists made by a scan of every centre
    assert use.wanted()
    use.record(k, relabelled=100_000, decided=99_000, scanned=1_500_000, made=scan)  # pays
    assert use.wanted()
    use.record(k, relabelled=100_000, decided=40_000, scanned=1_500_000, made=scan)  # k a row

    def skipped() -> int:
        passes_without = 0
        while not use.wanted():
            passes_without += 1
        return passes_without

    pauses = [skipped()]
    for _ in range(2):  # few rows relabelled: the lists' k^2 dominates
        use.record(k, relabelled=1_000, decided=1_000, scanned=12_000, made=scan)
        pauses.append(skipped())
    assert pauses == [passes.NEIGHBOUR_PAUSE * 2**i for i in range(3)]
    # The same rows with lists kept up (a few dozen gaps a centre): they pay.
    use.record(k, relabelled=1_000, decided=1_000, scanned=12_000, made=48 * k)
    assert use.wanted()
    use.record(k, relabelled=100_000, decided=100_000, scanned=1_200_000, made=scan)  # pays
    assert use.wanted()
    use.record(k, relabelled=0, decided=0, scanned=0, made=scan)
    assert skipped() == passes.NEIGHBOUR_PAUSE


@needs_compiler
@pytest.mark.parametrize(("d", "lists"), [(3, True), (32, False)])
def test_lloyd_makes_neighbour_lists_where_they_pay(d: int, lists: bool) -> None:
    """Uniform points: on 3 features a dozen of its old centre's neighbours decide a row;
    on 32, a centre has too many neighbours at about the same distance."""
    gen = torch.Generator().manual_seed(0)
    X = torch.rand(40_000, d, generator=gen)
    ws = workspace_on("kernel", X, None, 256, chunk_size=4096)
    seen: list[tuple[int, int, int]] = []
    record = ws._neighbour_use.record
    ws._neighbour_use.record = lambda k, *counts, made: (
        seen.append(counts),
        record(k, *counts, made=made),
    )
    C = X[:256].clone()
    for iteration in range(6):
        C, _, _ = ws.lloyd_iteration(C, warm=iteration > 0)
    assert (len(seen) == 5) == lists  # every warm pass, or tries between pauses
    relabelled, decided, _ = seen[0]
    assert (decided > 0.9 * relabelled) == lists


@pytest.mark.parametrize(("n", "chunk", "rows"), [(400_000, 1024, 1 << 15), (40_000, 1024, 5000)])
def test_big_blocks_do_not_depend_on_the_threads(n: int, chunk: int, rows: int) -> None:
    """Passes without a ``(rows, k)`` block take at most 32 768 rows and a bounded work,
    at least 8 blocks where the chunk allows, whatever the threads (the order of their
    sums is the same)."""
    X = torch.zeros(n, 2)
    for threads in (1, 2):
        with BlockPool(threads) as pool:
            ws = Workspace(X, None, 4, chunk_size=chunk, pool=pool)
            assert ws.big_block_rows() == rows
    assert Workspace(X[:6000], None, 4, chunk_size=chunk).big_block_rows() == chunk
    # A costly row (a scan of 4 096 centres on 32 features) takes fewer rows a block.
    ws = Workspace(X, None, 4, chunk_size=chunk)
    assert ws.big_block_rows(4096 * 32) == passes.BIG_BLOCK_WORK // (4096 * 32)
    assert ws.big_block_rows(1 << 40) == chunk
    # Wide rows: the (rows, d) temporaries stay within the room the memory bound counts
    # for a chunk's blocks.
    wide = Workspace(torch.zeros(40_000, 4096), None, 4, chunk_size=chunk)
    assert wide.big_block_rows() == memory.gather_block_rows(chunk, 4, 4096) < 2 * chunk
