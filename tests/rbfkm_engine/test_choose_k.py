"""The criteria that choose k from the path."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.datasets import make_blobs
from sklearn.metrics import silhouette_score

from rbfkm_engine import RBFKMeans
from rbfkm_engine.choose_k import (
    GAP_REFERENCES,
    GapReference,
    bic_scores,
    choose,
    gap_choice,
    lifetime_scores,
    principal_box_samples,
    silhouette,
)
from rbfkm_engine.kpath import PathCount


def test_lifetime_prefers_the_longest_lived_count():
    path = [
        PathCount(1, 100.0, 50.0),
        PathCount(2, 50.0, 40.0),
        PathCount(3, 40.0, 4.0),
        PathCount(4, 4.0, 3.0),
        PathCount(5, 3.0, None),
    ]
    assert lifetime_scores(path)[3] == pytest.approx(math.log(10.0))
    assert choose("lifetime", path, 4, torch.zeros(3, 2), 10.0) == 3


def test_ties_go_to_the_smaller_k():
    path = [PathCount(2, 8.0, 4.0), PathCount(3, 4.0, 2.0), PathCount(4, 2.0, None)]
    assert choose("lifetime", path, 3, torch.zeros(3, 2), 10.0) == 2


def test_a_path_that_never_split_gives_one():
    assert choose("lifetime", [PathCount(1, 5.0, None)], 5, torch.zeros(3, 2), 3.0) == 1


def test_bic_rewards_a_real_drop_in_inertia():
    sizes2 = torch.tensor([50.0, 50.0], dtype=torch.float64)
    sizes3 = torch.tensor([50.0, 25.0, 25.0], dtype=torch.float64)
    path = [
        PathCount(2, 2.0, 1.0, inertia=100.0, sizes=sizes2),
        PathCount(3, 1.0, None, inertia=99.0, sizes=sizes3),
    ]
    scores = bic_scores(path, n_features=2, total_weight=100.0)
    assert scores[2] > scores[3]


def test_silhouette_matches_scikit_learn():
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(60, 3, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, 3, (60,), generator=gen)
    labels[0] = 4  # a singleton scores 0
    expected = silhouette_score(X.numpy(), labels.numpy())
    assert silhouette(torch.cdist(X, X), labels) == pytest.approx(expected, rel=1e-9)
    assert silhouette(torch.cdist(X, X), torch.zeros(60, dtype=torch.long)) is None


def test_gap_reference_is_the_mean_and_scaled_spread_of_log_inertias():
    paths = [{2: 4.0, 3: 2.0}, {2: 16.0, 3: 2.0, 4: 1.0}]
    reference = GapReference.from_paths(paths)
    assert set(reference.mean_log) == {2, 3}  # 4 is not on every reference path
    assert reference.mean_log[2] == pytest.approx(math.log(8.0))
    assert reference.spread[2] == pytest.approx(math.log(2.0) * math.sqrt(1.5))
    assert reference.spread[3] == 0.0


def test_gap_rule_takes_the_smallest_k_not_beaten_by_the_next():
    # Data inertia per unit weight falls sharply up to k = 3, then like the reference.
    reference = GapReference({2: 0.0, 3: -0.5, 4: -1.0, 5: -1.5}, dict.fromkeys((2, 3, 4, 5), 0.1))
    inertias = {2: math.exp(-1.0), 3: math.exp(-3.0), 4: math.exp(-3.45), 5: math.exp(-3.9)}
    path = [PathCount(k, None, None, inertia=10.0 * w) for k, w in inertias.items()]
    # gaps: 1.0, 2.5, 2.45, 2.4: k = 3 is the first with gap(k) >= gap(k+1) - s.
    assert gap_choice(path, reference, 10.0, 5) == 3
    assert choose("gap", path, 5, torch.zeros(3, 2), 10.0, reference) == 3
    # Counts beyond max_clusters do not take part; the largest left wins when none stops.
    assert gap_choice(path, reference, 10.0, 2) == 2


def test_reference_sets_fill_the_box_of_the_principal_axes():
    rng = np.random.default_rng(0)
    # A thin diagonal strip: its principal box is much smaller than its coordinate box.
    t = rng.uniform(-1, 1, 4000)
    X = torch.from_numpy(np.column_stack([t, t + rng.uniform(-0.05, 0.05, 4000)]))
    mean = X.mean(dim=0)
    cov = torch.cov(X.T, correction=0)
    generator = torch.Generator().manual_seed(0)
    sets = principal_box_samples(X, mean, cov, generator, 500)
    assert len(sets) == GAP_REFERENCES and all(Z.shape == (500, 2) for Z in sets)
    Z = torch.cat(sets)
    off_axis = (Z[:, 1] - Z[:, 0]).abs()
    assert float(off_axis.max()) < 0.08  # inside the strip's width, not the square's
    assert float(Z[:, 0].min()) < -0.9 and float(Z[:, 0].max()) > 0.9
    again = principal_box_samples(X, mean, cov, torch.Generator().manual_seed(0), 500)
    assert all(torch.equal(a, b) for a, b in zip(sets, again, strict=True))


@pytest.mark.parametrize("criterion", ["gap", "silhouette"])
def test_the_criteria_find_separated_clusters(criterion):
    X, _ = make_blobs(1500, centers=4, cluster_std=0.4, random_state=3)
    km = RBFKMeans("auto", max_clusters=8, random_state=0, device="cpu")
    km._k_criterion = criterion
    km.fit(X)
    assert km.n_clusters_ == 4
    np.testing.assert_array_equal(km.labels_, km.predict(X))


def test_the_default_criterion_is_the_gap():
    assert RBFKMeans._k_criterion == "gap"
