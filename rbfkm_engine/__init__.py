"""rbfkm_engine: annealed RBF-K-Means on PyTorch.

K-Means is the zero-temperature limit of a radial-basis-function network: at temperature
``sigma`` the responsibilities are ``map(-D / sigma)`` (softmax, sparse entmax15 or hard),
and annealing ``sigma`` from hot to cold ends on a K-Means fixed point. The same maps make
a differentiable layer, :class:`RBFKMeansLayer`.

The names below load on first use, so ``rbfkm_engine.params`` and ``rbfkm_engine.device``
import without torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .model import RBFKMeans
    from .nn import RBFKMeansLayer
    from .progress import FitInterrupted, FitProgress
    from .reducer import ShardedFitError

__all__ = ["FitInterrupted", "FitProgress", "RBFKMeans", "RBFKMeansLayer", "ShardedFitError"]
__version__ = "0.1.0"

_HOMES = {
    "FitInterrupted": ".progress",
    "FitProgress": ".progress",
    "RBFKMeans": ".model",
    "RBFKMeansLayer": ".nn",
    "ShardedFitError": ".reducer",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name], __name__), name)
