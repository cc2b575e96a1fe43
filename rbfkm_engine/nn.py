"""``RBFKMeansLayer``: the responsibility map as a differentiable ``torch.nn.Module``.

The forward pass is the E-step at a fixed temperature, ``map(-||x - c_j||^2 / sigma)``;
gradients flow to the inputs, the centres and (optionally) the temperature, so the layer
can be trained end to end inside a network (e.g. a clustering head on an encoder).
"""

from __future__ import annotations

import math

import torch
from entmax import entmax15
from torch import nn

from .params import ASSIGNMENTS


class RBFKMeansLayer(nn.Module):
    """Soft cluster assignment of a batch: ``(batch, n_features) -> (batch, n_clusters)``.

    Parameters
    ----------
    n_clusters, n_features : int
    assignment : {"entmax15", "softmax", "hard"}
        ``"hard"`` returns one-hot rows (no gradient through the assignment).
    sigma : float
        Temperature, > 0.
    learnable_sigma : bool
        Learn ``log sigma`` as a parameter (keeps sigma positive).
    """

    def __init__(
        self,
        n_clusters: int,
        n_features: int,
        *,
        assignment: str = "entmax15",
        sigma: float = 1.0,
        learnable_sigma: bool = False,
    ) -> None:
        super().__init__()
        if n_clusters < 1 or n_features < 1:
            raise ValueError("n_clusters and n_features must be >= 1")
        if assignment not in ASSIGNMENTS:
            raise ValueError(f"assignment must be one of {ASSIGNMENTS}, got {assignment!r}")
        if not (math.isfinite(sigma) and sigma > 0):
            raise ValueError(f"sigma must be a finite float > 0, got {sigma}")
        self.n_clusters = n_clusters
        self.n_features = n_features
        self.assignment = assignment
        self.centroids = nn.Parameter(torch.randn(n_clusters, n_features))
        log_sigma = torch.tensor(math.log(sigma))
        if learnable_sigma:
            self.log_sigma = nn.Parameter(log_sigma)
        else:
            self.register_buffer("log_sigma", log_sigma)

    @property
    def sigma(self) -> torch.Tensor:
        return self.log_sigma.exp()

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
        """Squared distances ``(batch, n_clusters)``, one GEMM, clamped at 0."""
        c = self.centroids
        d = (x * x).sum(-1, keepdim=True) - 2.0 * x @ c.T + (c * c).sum(-1)
        return d.clamp_min(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise ValueError(
                f"expected input of shape (batch, {self.n_features}), got {tuple(x.shape)}"
            )
        d = self.distances(x)
        if self.assignment == "hard":
            labels = d.argmin(dim=1)
            return nn.functional.one_hot(labels, self.n_clusters).to(d.dtype)
        # Shifting by the (detached) row minimum leaves the map unchanged and keeps the
        # scores finite at small sigma.
        z = -(d - d.min(dim=1, keepdim=True).values.detach()) / self.sigma
        if self.assignment == "softmax":
            return torch.softmax(z, dim=1)
        if z.dtype in (torch.float16, torch.bfloat16):
            return entmax15(z.float(), dim=1).to(z.dtype)
        return entmax15(z, dim=1)

    def extra_repr(self) -> str:
        return (
            f"n_clusters={self.n_clusters}, n_features={self.n_features}, "
            f"assignment={self.assignment!r}, "
            f"learnable_sigma={isinstance(self.log_sigma, nn.Parameter)}"
        )
