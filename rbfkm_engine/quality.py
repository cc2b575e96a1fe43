"""Quality metrics of a partition: cluster sizes and the usual internal indices.

What a result reports beside the inertia, so that fits of different ``k`` (or an
``n_clusters="auto"`` fit) can be judged without the labels of the truth: the silhouette
(Rousseeuw, 1987) on a seeded sample of rows, the Davies-Bouldin and the Calinski-Harabasz
indices (scikit-learn's definitions, computed on all rows). Each is ``None`` where it is
undefined: fewer than 2 non-empty clusters, or as many clusters as rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.metrics import calinski_harabasz_score, davies_bouldin_score, silhouette_score

#: Rows the silhouette is computed on (its cost is quadratic in them).
SILHOUETTE_SAMPLE = 2000


def quality_metrics(
    X: Any, labels: np.ndarray, n_clusters: int, *, random_state: int = 0
) -> dict[str, Any]:
    """``sizes`` (points per cluster, all ``n_clusters``), ``silhouette`` (on at most
    :data:`SILHOUETTE_SAMPLE` rows drawn with ``random_state``), ``davies_bouldin`` and
    ``calinski_harabasz``; the last three ``None`` where undefined."""
    labels = np.asarray(labels)
    sizes = np.bincount(labels, minlength=n_clusters)
    used = int(np.count_nonzero(sizes))
    metrics: dict[str, Any] = {
        "sizes": [int(size) for size in sizes],
        "silhouette": None,
        "davies_bouldin": None,
        "calinski_harabasz": None,
    }
    n = labels.shape[0]
    if used < 2 or used >= n:
        return metrics
    X = np.asarray(X)
    metrics["davies_bouldin"] = float(davies_bouldin_score(X, labels))
    metrics["calinski_harabasz"] = float(calinski_harabasz_score(X, labels))
    rows = np.random.RandomState(random_state).permutation(n)[: min(n, SILHOUETTE_SAMPLE)]
    if 2 <= len(np.unique(labels[rows])) < rows.size:
        metrics["silhouette"] = float(silhouette_score(X[np.sort(rows)], labels[np.sort(rows)]))
    return metrics
