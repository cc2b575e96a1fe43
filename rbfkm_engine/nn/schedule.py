"""A temperature schedule for a training loop, in the style of ``torch.optim.lr_scheduler``.

:class:`SigmaScheduler` cools a layer's ``sigma`` geometrically, ``sigma_t = max(sigma0
cooling^t, sigma_min)``, one ``step()`` per epoch (or batch), as the engine's annealing
does per temperature. :func:`critical_sigma` gives the engine's start: just above the
critical temperature, where the centres stop being all at the data's mean
(docs/algorithm.md), and :func:`auto_sigma_min` its end.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..moments import largest_eigenvalue, weighted_covariance
from ..temperature import SIGMA0_MARGIN, SIGMA_MIN_RATIO, critical_temperature
from .layer import RBFKMeansLayer
from .maps import HARD_ASSIGNMENTS


def _largest_eigenvalue(x: torch.Tensor) -> float:
    """``lambda_max`` of the covariance of ``x``'s rows ``(..., d)``, in float64."""
    rows = x.detach().reshape(-1, x.shape[-1])
    return largest_eigenvalue(weighted_covariance(rows))


def _map_of(layer: RBFKMeansLayer) -> str:
    """The map whose critical temperature applies: the straight-through one's softmax."""
    if layer.metric != "euclidean" or layer.kernel != "gaussian":
        raise ValueError(
            "the critical temperature is that of the Gaussian kernel and the Euclidean "
            f"metric, not kernel={layer.kernel!r}, metric={layer.metric!r}"
        )
    if layer.assignment == "hard":
        raise ValueError("a hard layer has no temperature to schedule")
    return "softmax" if layer.assignment in HARD_ASSIGNMENTS else layer.assignment


def critical_sigma(layer: RBFKMeansLayer, x: torch.Tensor) -> float:
    """The engine's ``sigma0="auto"``: ``SIGMA0_MARGIN`` times the critical temperature of
    ``layer``'s ``n_clusters`` coincident centres on the data ``x`` ``(..., d)``."""
    lambda_max = _largest_eigenvalue(x)
    return SIGMA0_MARGIN * critical_temperature(lambda_max, layer.n_clusters, _map_of(layer))


def auto_sigma_min(layer: RBFKMeansLayer, x: torch.Tensor) -> float:
    """The engine's ``sigma_min="auto"``: ``SIGMA_MIN_RATIO`` times the softmax critical
    temperature, where every map is hard for all but near-ties."""
    _map_of(layer)
    return SIGMA_MIN_RATIO * critical_temperature(_largest_eigenvalue(x), 1, "softmax")


class SigmaScheduler:
    """Cool ``layer``'s temperature geometrically on each :meth:`step`.

    Parameters
    ----------
    layer : RBFKMeansLayer
    sigma_min : float
        The floor, > 0.
    cooling : float
        In ``(0, 1)``: the factor per step.
    sigma0 : float, optional
        The start; the layer's current ``sigma`` when omitted.
    last_epoch : int
        As ``torch.optim.lr_scheduler``'s: -1 starts afresh (the constructor's step sets
        ``sigma0``).

    A learnable ``sigma`` keeps learning between steps; each step sets it to the
    schedule's value.
    """

    def __init__(
        self,
        layer: RBFKMeansLayer,
        *,
        sigma_min: float,
        cooling: float = 0.9,
        sigma0: float | None = None,
        last_epoch: int = -1,
    ) -> None:
        if not 0.0 < cooling < 1.0:
            raise ValueError(f"cooling must be in (0, 1), got {cooling}")
        sigma0 = float(layer.sigma) if sigma0 is None else float(sigma0)
        if not (sigma0 > 0 and sigma_min > 0 and math.isfinite(sigma0)):
            raise ValueError("sigma0 and sigma_min must be finite and > 0")
        self.layer = layer
        self.sigma0, self.sigma_min, self.cooling = sigma0, float(sigma_min), float(cooling)
        self.last_epoch = last_epoch
        self.step()

    @classmethod
    def from_data(
        cls, layer: RBFKMeansLayer, x: torch.Tensor, *, cooling: float = 0.9
    ) -> SigmaScheduler:
        """The engine's schedule on data ``x``: from :func:`critical_sigma` down to
        :func:`auto_sigma_min`."""
        return cls(
            layer,
            sigma0=critical_sigma(layer, x),
            sigma_min=auto_sigma_min(layer, x),
            cooling=cooling,
        )

    def sigma_at(self, epoch: int) -> float:
        """The schedule's ``sigma`` after ``epoch`` steps (logs: no underflow of
        ``cooling ** epoch``)."""
        log_sigma = math.log(self.sigma0) + max(epoch, 0) * math.log(self.cooling)
        return max(math.exp(log_sigma), self.sigma_min)

    def step(self) -> None:
        self.last_epoch += 1
        self.layer.set_sigma(self.sigma_at(self.last_epoch))

    def get_last_sigma(self) -> float:
        return self.sigma_at(self.last_epoch)

    def state_dict(self) -> dict[str, Any]:
        return {
            "sigma0": self.sigma0,
            "sigma_min": self.sigma_min,
            "cooling": self.cooling,
            "last_epoch": self.last_epoch,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sigma0 = float(state["sigma0"])
        self.sigma_min = float(state["sigma_min"])
        self.cooling = float(state["cooling"])
        self.last_epoch = int(state["last_epoch"])
