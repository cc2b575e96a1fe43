"""rbfkm_client: the Python client of the rbfkm clustering service (no torch needed).

>>> from rbfkm_client import Client
>>> client = Client("http://127.0.0.1:8000")          # or $RBFKM_URL
>>> job = client.fit(X, n_clusters=8)                  # uploads X, waits with a progress bar
>>> client.result(job).labels                          # numpy

:class:`AsyncClient` has the same methods for asyncio; :class:`RemoteRBFKMeans` is a
scikit-learn estimator whose ``fit`` and ``predict`` run on the service
(``rbfkm_client.sklearn``, needs scikit-learn); ``rbfkm-client`` (or ``rbfkm fit``,
``rbfkm jobs``) is the command line.
"""

from __future__ import annotations

from typing import Any

from rbfkm_client.client import AsyncClient, Client
from rbfkm_client.errors import ApiError, ConnectionFailed, JobFailed, RbfkmError, WaitTimeout
from rbfkm_client.models import Dataset, Job, Prediction, Result
from rbfkm_client.protocol import Retry
from rbfkm_client.webhooks import WebhookVerificationError, verify_webhook

__version__ = "0.1.0"

__all__ = [
    "ApiError",
    "AsyncClient",
    "Client",
    "ConnectionFailed",
    "Dataset",
    "Job",
    "JobFailed",
    "Prediction",
    "RbfkmError",
    "RemoteRBFKMeans",
    "Result",
    "Retry",
    "WaitTimeout",
    "WebhookVerificationError",
    "verify_webhook",
]


def __getattr__(name: str) -> Any:
    # The estimator imports scikit-learn, an optional dependency: only when asked for.
    if name == "RemoteRBFKMeans":
        from rbfkm_client.sklearn import RemoteRBFKMeans

        return RemoteRBFKMeans
    raise AttributeError(f"module 'rbfkm_client' has no attribute {name!r}")
