"""The solver's passes: farthest-first re-seeding, padded blocks shared with soft passes."""

from __future__ import annotations

import pytest
import torch

from rbfkm_engine.passes import Workspace
from rbfkm_engine.reseed import _take_farthest, farthest_first


def points(case: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    g = torch.Generator().manual_seed(0)
    X = torch.randn((6000, 3), generator=g, dtype=torch.float64)
    if case == "duplicates":  # many equal distances: the candidates' check fails, full passes
        X = X[torch.randint(0, 12, (6000,), generator=g)]
    w = None
    if case == "weights":  # weight-0 points are never taken
        w = torch.rand(6000, generator=g, dtype=torch.float64)
        w[torch.rand(6000, generator=g) < 0.3] = 0.0
    return X, w


@pytest.mark.parametrize("case", ("distinct", "duplicates", "weights"))
@pytest.mark.parametrize("n_new", (1, 3, 40))
def test_farthest_first_equals_one_full_pass_per_pick(
    case: str, n_new: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    X, w = points(case)
    fp = Workspace(X, w, 4, chunk_size=1024)
    fp.hard_labels(X[:4].clone())
    closest = fp.min_dist.clone()
    expected = torch.stack([_take_farthest(fp, closest) for _ in range(n_new)])
    if case != "duplicates" and n_new < 40:  # the picks come from the candidates alone
        monkeypatch.setattr(
            "rbfkm_engine.reseed._take_farthest", lambda ws, closest: pytest.fail("full pass")
        )
    got = farthest_first(fp, fp.min_dist.clone(), n_new)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_padded_hard_block_after_a_soft_pass_in_the_same_buffer() -> None:
    # k = 5: hard passes use 16-column blocks whose padding is +inf; a soft pass writes its
    # responsibilities over that buffer, and the next hard pass must pad it again.
    X, _ = points("distinct")
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
