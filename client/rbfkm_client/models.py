"""What the client returns: datasets, jobs, results and predictions, as plain objects with
numpy arrays (pandas frames or scipy matrices where asked)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rbfkm_client.errors import require

#: The statuses after which a job does not change again.
FINISHED: frozenset[str] = frozenset({"succeeded", "failed", "canceled"})


@dataclass(frozen=True)
class Dataset:
    """A stored dataset (``GET /v1/datasets/{id}``); ``raw`` is the whole JSON object."""

    id: str
    name: str | None
    n_samples: int
    n_features: int
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Dataset:
        return cls(body["id"], body.get("name"), body["n_samples"], body["n_features"], body)


@dataclass(frozen=True)
class Job:
    """A clustering job (``GET /v1/jobs/{id}``); ``raw`` is the whole JSON object."""

    id: str
    status: str
    dataset_id: str
    progress: dict[str, Any]
    error: str | None
    params: dict[str, Any]
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Job:
        return cls(
            body["id"],
            body["status"],
            body["dataset_id"],
            body.get("progress") or {},
            body.get("error"),
            body.get("params") or {},
            body,
        )

    @property
    def finished(self) -> bool:
        """Whether the job has ended (succeeded, failed or canceled)."""
        return self.status in FINISHED

    @property
    def fraction(self) -> float | None:
        """How far the running fit is, 0 to 1 (None before a worker reports)."""
        return self.progress.get("fraction")


@dataclass(frozen=True)
class Result:
    """A fitted result: ``labels`` (n,), ``centroids`` (k, d) and the fit's scalars.

    Arrays are numpy; with ``as_frame=True`` the labels are a DataFrame indexed by ``row``
    (column ``label``) and the centroids one indexed by ``cluster`` (``f0`` .. ``f{d-1}``).
    """

    labels: Any
    centroids: Any
    inertia: float
    n_iter: int
    converged: bool
    sigma: float
    device: str | None
    history: list[dict[str, Any]] = field(default_factory=list)
    #: Clusters fitted (the ``k`` that ``n_clusters="auto"`` chose); None from older servers.
    n_clusters: int | None = None
    #: ``sizes``, ``silhouette``, ``davies_bouldin``, ``calinski_harabasz``.
    metrics: dict[str, Any] | None = None
    #: The counts of centres annealing passed through: ``k``, ``sigma_appear``,
    #: ``sigma_split``, ``inertia``.
    k_path: list[dict[str, Any]] = field(default_factory=list)
    #: Processes that fitted the job together (its ``parallel``); None from older servers.
    processes: int | None = None

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Result:
        return cls(
            labels=np.asarray(body.get("labels", []), dtype=np.int64),
            centroids=np.asarray(body.get("centroids", []), dtype=np.float64),
            **scalars(body),
            history=list(body.get("history") or []),
            n_clusters=body.get("n_clusters"),
            metrics=body.get("metrics"),
            k_path=list(body.get("k_path") or []),
            processes=body.get("processes"),
        )


def scalars(body: dict[str, Any]) -> dict[str, Any]:
    """The fit's scalars of a result (JSON body, or a table's ``rbfkm`` metadata)."""
    return {
        "inertia": float(body["inertia"]),
        "n_iter": int(body["n_iter"]),
        "converged": bool(body.get("converged", True)),
        "sigma": float(body["sigma"]),
        "device": body.get("device"),
    }


def csr_from_pages(pages: list[dict[str, Any]]) -> Any:
    """A scipy CSR matrix from the pages of ``GET /v1/jobs/{id}/assignments`` (in order)."""
    sparse = require("scipy.sparse", "sparse")
    shape = tuple(pages[0]["shape"]) if pages else (0, 0)
    indptr, indices, values, base = [np.zeros(1, dtype=np.int64)], [], [], 0
    for page in pages:
        pointers = np.asarray(page["indptr"], dtype=np.int64)
        indptr.append(pointers[1:] + base)
        base += int(pointers[-1])
        indices.append(np.asarray(page["indices"], dtype=np.int64))
        values.append(np.asarray(page["values"], dtype=np.float64))
    return sparse.csr_matrix(
        (
            np.concatenate(values) if values else np.zeros(0),
            np.concatenate(indices) if indices else np.zeros(0, dtype=np.int64),
            np.concatenate(indptr),
        ),
        shape=shape,
    )


@dataclass(frozen=True)
class Prediction:
    """New points assigned by a fitted job: hard ``labels`` and soft ``assignments``."""

    labels: np.ndarray
    rows: dict[str, Any] = field(repr=False)

    @property
    def assignments(self) -> Any:
        """The soft assignments as a scipy CSR matrix (needs scipy)."""
        return csr_from_pages([self.rows])
