"""``RBFKMeansLayer``: the responsibility map as a differentiable ``torch.nn.Module``.

The forward pass is the E-step at a temperature, ``map(-E(x, c_j) / sigma)``, optionally
after ``n_iter`` differentiable fixed-point iterations of the centres (DKM); gradients
flow to the inputs, the centres and (optionally) the temperature, so the layer can be
trained end to end inside a network (e.g. a clustering head on an encoder). Inputs of any
floating dtype are computed in at least float32 and returned in their own dtype.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn

from .fixed_point import iterate
from .kernels import KERNELS, METRICS, dissimilarities, energies
from .maps import LAYER_ASSIGNMENTS, responsibilities
from .scores import scaled_scores


class Clustering(NamedTuple):
    """What one forward pass computed, for the losses: all in the compute dtype."""

    #: ``(..., n, k)`` rows on the simplex.
    responsibilities: torch.Tensor
    #: ``(..., n, k)`` the kernel's energies the map saw (the squared distances for the
    #: Gaussian kernel and the Euclidean metric).
    energies: torch.Tensor
    #: ``(k, d)``, or ``(..., k, d)`` after fixed-point iterations on batched input.
    centroids: torch.Tensor


class RBFKMeansLayer(nn.Module):
    """Soft cluster assignment: ``(..., n, n_features) -> (..., n, n_clusters)``.

    Parameters
    ----------
    n_clusters, n_features : int
    assignment : {"entmax15", "softmax", "hard", "hard_st"}
        ``"hard"`` returns one-hot rows (no gradient through the assignment);
        ``"hard_st"`` the same rows with the softmax's gradient (straight-through).
    sigma : float
        Temperature, > 0.
    learnable_sigma : bool
        Learn ``log sigma`` as a parameter (keeps sigma positive).
    metric : {"euclidean", "cosine"}
        Squared Euclidean distances, or ``1 - cos``.
    kernel : {"gaussian", "student_t"}
        ``"student_t"`` with ``alpha`` degrees of freedom is DEC's soft assignment at
        ``sigma = 1`` (see :mod:`~rbfkm_engine.nn.kernels`).
    alpha : float
        Degrees of freedom of the Student-t kernel, > 0.
    n_iter : int
        Fixed-point iterations of the centres inside the forward pass (DKM), >= 0.
    """

    def __init__(
        self,
        n_clusters: int,
        n_features: int,
        *,
        assignment: str = "entmax15",
        sigma: float = 1.0,
        learnable_sigma: bool = False,
        metric: str = "euclidean",
        kernel: str = "gaussian",
        alpha: float = 1.0,
        n_iter: int = 0,
    ) -> None:
        super().__init__()
        _check_options(n_clusters, n_features, assignment, metric, kernel)
        if not (math.isfinite(sigma) and sigma > 0):
            raise ValueError(f"sigma must be a finite float > 0, got {sigma}")
        if not (math.isfinite(alpha) and alpha > 0):
            raise ValueError(f"alpha must be a finite float > 0, got {alpha}")
        if isinstance(n_iter, bool) or not isinstance(n_iter, int) or n_iter < 0:
            raise ValueError(f"n_iter must be an int >= 0, got {n_iter!r}")
        self.n_clusters = n_clusters
        self.n_features = n_features
        self.assignment = assignment
        self.metric = metric
        self.kernel = kernel
        self.alpha = float(alpha)
        self.n_iter = n_iter
        self.centroids = nn.Parameter(torch.randn(n_clusters, n_features))
        log_sigma = torch.tensor(math.log(sigma))
        if learnable_sigma:
            self.log_sigma = nn.Parameter(log_sigma)
        else:
            self.register_buffer("log_sigma", log_sigma)

    @property
    def sigma(self) -> torch.Tensor:
        return self.log_sigma.exp()

    @torch.no_grad()
    def set_sigma(self, sigma: float) -> None:
        """Set the temperature (a schedule's step); a learnable one keeps learning from it."""
        if not (math.isfinite(sigma) and sigma > 0):
            raise ValueError(f"sigma must be a finite float > 0, got {sigma}")
        self.log_sigma.fill_(math.log(sigma))

    @classmethod
    def from_estimator(cls, estimator, **kwargs) -> RBFKMeansLayer:
        """A layer initialised with a fitted :class:`~rbfkm_engine.RBFKMeans`'s centres."""
        centers = torch.as_tensor(estimator.cluster_centers_)
        kwargs.setdefault("assignment", estimator.assignment)
        if estimator.sigma_ > 0:
            kwargs.setdefault("sigma", estimator.sigma_)
        layer = cls(centers.shape[0], centers.shape[1], **kwargs)
        with torch.no_grad():
            layer.centroids.copy_(centers.to(layer.centroids.dtype))
        return layer

    def distances(self, x: torch.Tensor) -> torch.Tensor:
        """Dissimilarities ``(..., n, n_clusters)`` to the layer's centres (squared
        distances for the Euclidean metric), in the compute dtype."""
        x, c = self._compute_inputs(x)
        return dissimilarities(x, c, self.metric)

    def cluster(self, x: torch.Tensor) -> Clustering:
        """The forward pass with what the losses need (see :class:`Clustering`).

        Autocast is off inside: its half-precision products would undo the float32
        accumulation (the distances' expansion cancels digits).
        """
        x, c = self._compute_inputs(x)
        with torch.autocast(x.device.type, enabled=False):
            c = iterate(x, c, self.n_iter, lambda c_: self._respond(x, c_)[0], self.metric)
            r, e = self._respond(x, c)
        return Clustering(r, e, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cluster(x).responsibilities.to(x.dtype)

    def _respond(self, x: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        d = dissimilarities(x, c, self.metric)
        e = energies(d, self.kernel, self.alpha)
        z = scaled_scores(e, self.log_sigma)
        return responsibilities(z, d, self.assignment), e

    def _compute_inputs(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` and the centres in the compute dtype: at least float32, so half inputs
        accumulate their sums in float32."""
        if x.ndim < 2 or x.shape[-1] != self.n_features:
            raise ValueError(
                f"expected input of shape (..., n, {self.n_features}), got {tuple(x.shape)}"
            )
        if not x.is_floating_point():
            raise ValueError(f"expected a floating-point input, got {x.dtype}")
        dtype = torch.promote_types(
            torch.promote_types(x.dtype, self.centroids.dtype), torch.float32
        )
        return x.to(dtype), self.centroids.to(dtype)

    def extra_repr(self) -> str:
        return (
            f"n_clusters={self.n_clusters}, n_features={self.n_features}, "
            f"assignment={self.assignment!r}, metric={self.metric!r}, "
            f"kernel={self.kernel!r}, n_iter={self.n_iter}, "
            f"learnable_sigma={isinstance(self.log_sigma, nn.Parameter)}"
        )


def _check_options(
    n_clusters: int, n_features: int, assignment: str, metric: str, kernel: str
) -> None:
    if n_clusters < 1 or n_features < 1:
        raise ValueError("n_clusters and n_features must be >= 1")
    for name, value, options in (
        ("assignment", assignment, LAYER_ASSIGNMENTS),
        ("metric", metric, METRICS),
        ("kernel", kernel, KERNELS),
    ):
        if value not in options:
            raise ValueError(f"{name} must be one of {options}, got {value!r}")
