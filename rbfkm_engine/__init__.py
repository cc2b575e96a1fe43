"""rbfkm_engine: annealed RBF-K-Means on PyTorch.

K-Means is the zero-temperature limit of a radial-basis-function network: at temperature
``sigma`` the responsibilities are ``map(-D / sigma)`` (softmax, sparse entmax15 or hard),
and annealing ``sigma`` from hot to cold ends on a K-Means fixed point. The same maps make
a differentiable layer, :class:`RBFKMeansLayer`.
"""

from .model import RBFKMeans
from .nn import RBFKMeansLayer
from .solver import FitProgress

__all__ = ["FitProgress", "RBFKMeans", "RBFKMeansLayer"]
__version__ = "0.1.0"
