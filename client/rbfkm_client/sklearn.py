"""`RemoteRBFKMeans`: a scikit-learn estimator whose ``fit`` and ``predict`` run on an rbfkm
service, for pipelines, ``clone`` and grid searches that expect an estimator."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils.validation import check_is_fitted

from rbfkm_client.client import DEFAULT_TIMEOUT_S, Client

#: The engine's parameters the estimator passes on (None: the service's default).
ENGINE_PARAMS: tuple[str, ...] = (
    "max_clusters",
    "assignment",
    "metric",
    "sigma0",
    "sigma_min",
    "cooling",
    "overshoot",
    "max_iter",
    "tol",
    "init",
    "n_init",
    "random_state",
    "device",
    "max_runtime_s",
    "parallel",
)


class RemoteRBFKMeans(ClusterMixin, BaseEstimator):
    """Annealed RBF-K-Means fitted by an rbfkm service.

    ``url`` and ``api_key`` as for :class:`rbfkm_client.Client`; the engine's parameters
    as for ``POST /v1/jobs`` (each None leaves the service's default). ``fit`` uploads
    ``X``, runs the job and reads the result: ``labels_``, ``cluster_centers_``,
    ``inertia_``, ``n_iter_``, ``converged_``, ``sigma_``, ``n_clusters_`` (the ``k`` that
    ``n_clusters="auto"`` chose), ``metrics_``, ``k_path_``, and ``job_id_`` (the job that
    ``predict`` asks to assign new points).
    """

    def __init__(
        self,
        n_clusters: int | str = 8,
        *,
        url: str | None = None,
        api_key: str | None = None,
        max_clusters: int | None = None,
        assignment: str | None = None,
        metric: str | None = None,
        sigma0: float | str | None = None,
        sigma_min: float | str | None = None,
        cooling: float | None = None,
        overshoot: float | None = None,
        max_iter: int | None = None,
        tol: float | None = None,
        init: Any = None,
        n_init: int | None = None,
        random_state: int | None = None,
        device: str | None = None,
        max_runtime_s: float | None = None,
        parallel: int | str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        progress: bool | None = False,
    ) -> None:
        self.n_clusters = n_clusters
        self.url = url
        self.api_key = api_key
        self.max_clusters = max_clusters
        self.assignment = assignment
        self.metric = metric
        self.sigma0 = sigma0
        self.sigma_min = sigma_min
        self.cooling = cooling
        self.overshoot = overshoot
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.n_init = n_init
        self.random_state = random_state
        self.device = device
        self.max_runtime_s = max_runtime_s
        self.parallel = parallel
        self.timeout = timeout
        self.progress = progress

    def _client(self) -> Client:
        return Client(self.url, self.api_key, timeout=self.timeout)

    def _engine_params(self) -> dict[str, Any]:
        params = {name: getattr(self, name) for name in ENGINE_PARAMS}
        if isinstance(params["init"], np.ndarray):
            params["init"] = params["init"].tolist()
        return params

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> RemoteRBFKMeans:
        """Fit on the service; ``y`` is ignored. ``sample_weight`` travels as one more
        column of the upload, which the service takes out as the dataset's weights."""
        with self._client() as client:
            data: Any = X
            if sample_weight is not None:
                data = client.upload(*weighted_columns(X, sample_weight))
            job = client.fit(data, self.n_clusters, progress=self.progress, **self._engine_params())
            result = client.result(job)
        self.job_id_ = job.id
        self.labels_ = result.labels
        self.cluster_centers_ = result.centroids
        self.inertia_ = result.inertia
        self.n_iter_ = result.n_iter
        self.converged_ = result.converged
        self.sigma_ = result.sigma
        self.n_clusters_ = len(result.centroids)
        self.metrics_ = result.metrics
        self.k_path_ = result.k_path
        self.n_features_in_ = result.centroids.shape[1]
        return self

    def predict(self, X: Any) -> np.ndarray:
        """The nearest fitted cluster of each row of ``X``, assigned by the service."""
        check_is_fitted(self, "job_id_")
        with self._client() as client:
            return client.predict(self.job_id_, X).labels


def weighted_columns(X: Any, sample_weight: Any) -> tuple[np.ndarray, None, str]:
    """``X`` as an array with ``sample_weight`` as its last column, and the upload
    arguments that name that column (``Client.upload(data, name, weight_column)``)."""
    array = np.asarray(X, dtype=np.float64)
    weights = np.asarray(sample_weight, dtype=np.float64)
    if array.ndim != 2 or weights.shape != (array.shape[0],):
        raise ValueError(
            f"sample_weight must be one weight per row of X: X has shape {array.shape}, "
            f"sample_weight {weights.shape}"
        )
    return np.column_stack([array, weights]), None, str(array.shape[1])
