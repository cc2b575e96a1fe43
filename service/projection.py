"""A 2-D picture of a fit: a seeded sample of the data projected on its first two principal
components, with each point's label and the entropy of its soft assignment.

The worker computes it once, when a job finishes (:meth:`service.results.ResultStore.save`),
and stores it with the result, so the page that draws it (`/ui/`, `GET
/v1/jobs/{id}/projection`) reads a few hundred kilobytes instead of the whole dataset. The
sample has at most :data:`MAX_POINTS` rows, drawn without replacement with a fixed seed
(:data:`SEED`) and kept in row order: the same fit gives the same picture. The principal
axes are those of the sample; the centroids are projected on the same axes.

A point's entropy is the Shannon entropy (nats) of its row of soft assignments: 0 for a
point that belongs to one cluster alone, at most ``ln k`` for one spread evenly over ``k``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

#: The most points a projection holds.
MAX_POINTS = 5000
#: The seed of the sample: fixed, so a result's picture does not change between reads.
SEED = 0
#: Up to this many rows or columns the axes come from an exact SVD, above from a randomized one.
EXACT_SVD_BELOW = 64
#: The file of an attempt's directory that holds the projection.
FILENAME = "projection.npz"


@dataclass(frozen=True)
class Projection:
    """The sampled rows (indices into the dataset), their 2-D points, labels and
    entropies, the centroids' 2-D points, and the share of the sample's variance each of
    the two axes explains (0 for an axis the data lacks: one feature, or one point)."""

    n_samples: int
    rows: np.ndarray
    points: np.ndarray
    labels: np.ndarray
    entropy: np.ndarray
    centroids: np.ndarray
    explained_variance_ratio: np.ndarray

    def as_json(self) -> dict[str, Any]:
        """The projection as plain JSON values (what the route sends)."""
        return {
            "n_samples": self.n_samples,
            "rows": self.rows.tolist(),
            "points": self.points.tolist(),
            "labels": self.labels.tolist(),
            "entropy": self.entropy.tolist(),
            "centroids": self.centroids.tolist(),
            "explained_variance_ratio": self.explained_variance_ratio.tolist(),
        }


def sample_rows(n_samples: int, max_points: int = MAX_POINTS, seed: int = SEED) -> np.ndarray:
    """At most ``max_points`` distinct row indices of ``n_samples``, seeded, ascending."""
    if n_samples <= max_points:
        return np.arange(n_samples, dtype=np.int64)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n_samples, size=max_points, replace=False)).astype(np.int64)


def row_entropy(assignments: sp.spmatrix, rows: np.ndarray) -> np.ndarray:
    """The Shannon entropy (nats) of each of ``rows`` of the soft assignments."""
    picked = sp.csr_matrix(assignments)[rows]
    weights = picked.data.astype(np.float64)
    terms = np.zeros_like(weights)
    positive = weights > 0
    terms[positive] = -weights[positive] * np.log(weights[positive])
    sums = np.add.reduceat(terms, picked.indptr[:-1]) if terms.size else np.zeros(len(rows))
    sums[np.diff(picked.indptr) == 0] = 0.0  # reduceat repeats a neighbour for empty rows
    return np.maximum(sums, 0.0)


def _top_singular(centred: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The two largest singular values of ``centred`` and their right singular vectors
    (fewer when it has fewer): exact for a small matrix; randomized for a large one, whose
    thin SVD would cost ``min(m, d)`` times more than the picture needs."""
    if min(centred.shape) <= EXACT_SVD_BELOW:
        _, singular, vt = np.linalg.svd(centred, full_matrices=False)
        return singular[:2], vt[:2]
    from sklearn.utils.extmath import randomized_svd

    _, singular, vt = randomized_svd(centred, 2, n_iter=7, random_state=seed)
    return singular, vt


def principal_axes(
    sample: np.ndarray, seed: int = SEED
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sample's mean, its first two principal axes (rows; zero rows where it has fewer
    than two directions) and the share of its variance each explains."""
    mean = sample.mean(axis=0)
    centred = sample - mean
    d = sample.shape[1]
    axes = np.zeros((2, d))
    ratio = np.zeros(2)
    total = float(np.square(centred).sum())
    if total > 0:
        singular, vt = _top_singular(centred, seed)
        count = min(2, vt.shape[0])
        axes[:count] = vt[:count]
        ratio[:count] = np.square(singular[:count]) / total
        # A fixed orientation: each axis's largest component positive.
        signs = np.sign(axes[np.arange(2), np.abs(axes).argmax(axis=1)])
        axes *= np.where(signs == 0, 1.0, signs)[:, None]
    return mean, axes, ratio


def project(
    X: Any,
    labels: np.ndarray,
    assignments: sp.spmatrix,
    centroids: np.ndarray,
    max_points: int = MAX_POINTS,
    seed: int = SEED,
) -> Projection:
    """The projection of a fit of ``X`` (an array, possibly memory-mapped)."""
    n_samples = int(np.asarray(labels).shape[0])
    rows = sample_rows(n_samples, max_points, seed)
    sample = np.asarray(X[rows], dtype=np.float64)
    mean, axes, ratio = principal_axes(sample, seed)
    return Projection(
        n_samples=n_samples,
        rows=rows,
        points=(sample - mean) @ axes.T,
        labels=np.asarray(labels, dtype=np.int64)[rows],
        entropy=row_entropy(assignments, rows),
        centroids=(np.asarray(centroids, dtype=np.float64) - mean) @ axes.T,
        explained_variance_ratio=ratio,
    )


def save(path: Path, projection: Projection) -> None:
    """Write ``projection`` to ``path`` (an uncompressed ``.npz``)."""
    with path.open("wb") as handle:
        np.savez(handle, **asdict(projection))


def load(path: Path) -> Projection:
    """The projection stored at ``path``."""
    with np.load(path) as stored:
        values = {name: stored[name] for name in stored.files}
    return Projection(**{**values, "n_samples": int(values["n_samples"])})
