"""`RemoteRBFKMeans` against the live service."""

from __future__ import annotations

import numpy as np
import pytest
from rbfkm_client import RemoteRBFKMeans
from rbfkm_client.sklearn import ENGINE_PARAMS, weighted_columns
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from rbfkm_engine import RBFKMeans
from service.schemas import JobCreate
from tests.rbfkm_client.conftest import KEY, Live, X


def test_the_estimator_passes_every_engine_parameter_of_the_api() -> None:
    # callback_url is where to announce the job's end, output where to copy its results:
    # neither is a parameter of the fit.
    job_only = {"dataset_id", "n_clusters", "callback_url", "output"}
    assert set(ENGINE_PARAMS) == set(JobCreate.model_fields) - job_only
    assert set(ENGINE_PARAMS) < set(RemoteRBFKMeans().get_params())


def test_fit_and_predict_run_on_the_service(live: Live) -> None:
    model = RemoteRBFKMeans(3, url=live.url, api_key=KEY, random_state=0, device="cpu")
    labels = model.fit_predict(X)
    assert labels.shape == (300,) and model.cluster_centers_.shape == (3, 2)
    assert model.inertia_ > 0 and model.n_iter_ >= 1 and model.n_features_in_ == 2
    assert np.array_equal(model.predict(X), labels)
    twin = clone(model)
    assert twin.get_params() == model.get_params() and not hasattr(twin, "labels_")


def test_in_a_pipeline(live: Live) -> None:
    pipeline = make_pipeline(StandardScaler(), RemoteRBFKMeans(3, url=live.url, api_key=KEY))
    labels = pipeline.fit(X).predict(X)
    assert len(set(labels.tolist())) == 3


def test_predict_before_fit_says_so() -> None:
    with pytest.raises(NotFittedError):
        RemoteRBFKMeans().predict(X)


def test_sample_weights_reach_the_fit(live: Live) -> None:
    weights = np.linspace(0.2, 5.0, X.shape[0])
    params = {"random_state": 0, "device": "cpu"}
    model = RemoteRBFKMeans(3, url=live.url, api_key=KEY, **params)
    model.fit(X, sample_weight=weights)
    local = RBFKMeans(3, **params).fit(X, sample_weight=weights)
    assert model.inertia_ == pytest.approx(local.inertia_, rel=1e-5)
    unweighted = RBFKMeans(3, **params).fit(X)
    assert model.inertia_ != pytest.approx(unweighted.inertia_, rel=1e-3)


def test_sample_weights_must_match_the_rows() -> None:
    with pytest.raises(ValueError, match="one weight per row"):
        weighted_columns(X, np.ones(X.shape[0] + 1))
