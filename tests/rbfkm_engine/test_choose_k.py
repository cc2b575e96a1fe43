"""The criteria that choose k from the path."""

from __future__ import annotations

import math

import pytest
import torch
from sklearn.metrics import silhouette_score

from rbfkm_engine.choose_k import bic_scores, choose, lifetime_scores, silhouette
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
