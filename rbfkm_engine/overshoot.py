"""How many centres a grown fit anneals to: ``n_clusters``, or more with ``overshoot``.

Annealing hands out centres by the data's phase transitions: a cluster splits once the
temperature falls below its own critical one, which its spread sets, not its mass. With
``k`` slots the widest regions take them first, and a dense region whose clusters are
narrow may find none left when its turn comes, while K-Means' optimum gives dense regions
smaller cells. With ``overshoot > 1`` annealing goes on to :func:`annealed_centres`, so
that regions split further, and :mod:`~rbfkm_engine.coarsen` then keeps ``k`` by the
inertia the cells would add, mass included.

Imports no torch: :mod:`~rbfkm_engine.memory` bounds a fit by it.
"""

from __future__ import annotations

import math


def annealed_centres(n_clusters: int, overshoot: float = 1.0) -> int:
    """The centres a grown fit of ``n_clusters`` anneals to, at most: ``overshoot`` times
    as many (at least ``n_clusters``). Annealing hands over to Lloyd once it has
    ``n_clusters`` and the points are nearly hard, however many more it was allowed: well
    separated clusters, or fewer distinct points, never split that far."""
    return max(n_clusters, math.ceil(overshoot * n_clusters))
