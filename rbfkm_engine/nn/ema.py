"""EMA centroid updates with dead-centre re-seeding (VQ-VAE's codebook update).

Instead of gradient steps, the centres follow exponential moving averages of the M-step's
sums: per centre a mass ``N_j <- decay N_j + (1 - decay) sum_i R_ij`` and a sum
``m_j <- decay m_j + (1 - decay) sum_i R_ij x_i``, and ``c_j = m_j / N_j`` (with Laplace
smoothing of the masses, so a centre losing its points moves slowly and never divides by
0). A centre whose mass falls below ``dead_mass`` is *dead*: it is re-seeded at the batch
point farthest from the live centres, farthest-first when several are dead, by the
engine's rule (:func:`~rbfkm_engine.reseed.farthest_first`, as for the fit's empty
clusters).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

from ..distances import squared_distances, squared_norms
from ..reducer import LOCAL, Reducer
from ..reseed import farthest_first
from .layer import RBFKMeansLayer


@dataclass
class _Points:
    """The part of the engine's workspace that :func:`farthest_first` reads."""

    X: torch.Tensor
    x_sq: torch.Tensor = field(init=False)
    w: None = None
    reducer: Reducer = LOCAL  # a batch is re-seeded from its own points

    def __post_init__(self) -> None:
        self.x_sq = squared_norms(self.X)

    def check(self) -> None:
        """Nothing stops a batch's re-seeding."""

    def kernel_for(self, C: torch.Tensor) -> None:
        """A batch's picks run in torch (on the layer's device)."""


class CentroidEMA(nn.Module):
    """EMA updates of a layer's centres (exclude them from the optimiser).

    Parameters
    ----------
    n_clusters, n_features : int
    decay : float
        In ``[0, 1)``; 0 is a plain M-step on each batch.
    eps : float
        Laplace smoothing of the masses.
    dead_mass : float
        A centre whose EMA mass (in points per batch) is below it is re-seeded; 0: never.
    """

    def __init__(
        self,
        n_clusters: int,
        n_features: int,
        *,
        decay: float = 0.99,
        eps: float = 1e-5,
        dead_mass: float = 1e-3,
    ) -> None:
        super().__init__()
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must be in [0, 1), got {decay}")
        if not (eps > 0 and dead_mass >= 0):
            raise ValueError("eps must be > 0 and dead_mass >= 0")
        self.decay, self.eps, self.dead_mass = decay, eps, dead_mass
        self.register_buffer("mass", torch.zeros(n_clusters))
        self.register_buffer("sums", torch.zeros(n_clusters, n_features))
        self.register_buffer("started", torch.tensor(False))

    @torch.no_grad()
    def update(self, layer: RBFKMeansLayer, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        """Fold a batch ``x`` ``(..., n, d)`` with responsibilities ``r`` ``(..., n, k)``
        into the averages, write the centres into ``layer.centroids`` and return the
        indices of the centres re-seeded."""
        x = x.detach().reshape(-1, x.shape[-1]).to(self.sums.dtype)
        r = r.detach().reshape(-1, r.shape[-1]).to(self.sums.dtype)
        if layer.metric == "cosine":
            x = F.normalize(x, dim=-1)
        keep = self.decay if bool(self.started) else 0.0
        self.mass.mul_(keep).add_(r.sum(dim=0), alpha=1.0 - keep)
        self.sums.mul_(keep).add_(r.T @ x, alpha=1.0 - keep)
        self.started.fill_(True)
        # No more re-seeded centres than the batch has points.
        dead = torch.nonzero(self.mass < self.dead_mass).squeeze(1)[: x.shape[0]]
        if dead.numel() > 0:
            self._reseed(layer, x, dead)
        layer.centroids.copy_(self._centres(layer.metric).to(layer.centroids.dtype))
        return dead

    def _centres(self, metric: str) -> torch.Tensor:
        total, k = self.mass.sum(), self.mass.shape[0]
        smoothed = (self.mass + self.eps) / (total + k * self.eps) * total
        centres = self.sums / smoothed.clamp_min(self.eps).unsqueeze(1)
        return F.normalize(centres, dim=-1) if metric == "cosine" else centres

    def _reseed(self, layer: RBFKMeansLayer, x: torch.Tensor, dead: torch.Tensor) -> None:
        """Dead centres to the batch points farthest from the live ones, each counted as
        one point's mass."""
        live = torch.ones_like(self.mass, dtype=torch.bool)
        live[dead] = False
        if bool(live.any()):
            c = layer.centroids.detach()[live].to(x.dtype)
            c = F.normalize(c, dim=-1) if layer.metric == "cosine" else c
            closest = squared_distances(x, c).amin(dim=1)
        else:
            closest = torch.full((x.shape[0],), torch.inf, dtype=x.dtype, device=x.device)
        points = farthest_first(_Points(x), closest, dead.numel())
        self.mass[dead] = 1.0
        self.sums[dead] = points.to(self.sums.dtype)
