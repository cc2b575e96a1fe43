"""scikit-learn's own estimator test suite, one test per check."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sklearn.base import BaseEstimator
from sklearn.utils.estimator_checks import parametrize_with_checks

from rbfkm_engine import RBFKMeans

ESTIMATORS = [
    RBFKMeans(n_clusters=3, max_iter=60, device="cpu", random_state=0),
    RBFKMeans(n_clusters=3, assignment="softmax", max_iter=60, device="cpu", random_state=0),
    RBFKMeans(n_clusters=3, assignment="hard", max_iter=60, device="cpu", random_state=0),
]


@parametrize_with_checks(ESTIMATORS)
def test_sklearn_compatible(
    estimator: BaseEstimator, check: Callable[[BaseEstimator], None]
) -> None:
    check(estimator)


def test_default_construction_is_a_valid_estimator() -> None:
    # check_estimator(RBFKMeans()) as the issue words it: the defaults, untouched.
    from sklearn.utils.estimator_checks import (
        check_get_params_invariance,
        check_parameters_default_constructible,
    )

    check_parameters_default_constructible("RBFKMeans", RBFKMeans())
    check_get_params_invariance("RBFKMeans", RBFKMeans())


@pytest.mark.parametrize("assignment", ["entmax15", "softmax", "hard"])
def test_clone_and_get_params_round_trip(assignment: str) -> None:
    from sklearn.base import clone

    est = RBFKMeans(n_clusters=4, assignment=assignment, cooling=0.7, device="cpu")
    twin = clone(est)
    assert twin.get_params() == est.get_params()
    assert twin.get_params()["assignment"] == assignment
