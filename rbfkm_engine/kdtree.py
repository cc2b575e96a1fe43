"""Each centre's nearest others from a k-d tree (scipy's ``cKDTree``).

Two steps of a fit need each of ``k`` points' nearest few others among themselves: the
trades' nearest cluster means (:mod:`~rbfkm_engine.trades`) and the clusters a sweep of
Hartigan moves prices first (:class:`~rbfkm_engine.native.HartiganState`). The ``k x k``
matrix of distances by blocks costs ``k^2 d`` and a sort or a minimum per row; a tree
costs about ``k log k`` per neighbour in few features. In many features a tree's
searches visit most of it, and the blocks cost less.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree

#: Points of at most this many features find their neighbours from a tree where the
#: caller's blocks would be more than one; in more features the blocks cost less.
TREE_MAX_FEATURES = 16


def nearest_others(points: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Each point's ``count`` nearest points (float64 ``m x d``; ``2 <= count <= m``),
    itself among them, nearest first: the distances (``m x count``) and the indices.
    A point is its own first unless another coincides with it; of points equally near,
    any may come first."""
    distance, index = cKDTree(points).query(points, k=count)
    return distance, index.astype(np.int64)
