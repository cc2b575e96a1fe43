"""The differentiable layer and what trains it.

- :class:`RBFKMeansLayer` (``layer``): the responsibility map as a ``torch.nn.Module``;
  its modes are built from ``kernels`` (metric and kernel), ``scores`` (the temperature),
  ``maps`` (softmax, entmax15, hard, straight-through) and ``fixed_point`` (DKM).
- ``losses``: the soft K-Means free energy and the commitment loss; ``dec``: DEC's target
  and KL loss.
- ``ema``: EMA centroid updates with dead-centre re-seeding.
- ``schedule``: a temperature schedule for a training loop, from the critical temperature.

docs/layer.md describes them.
"""

from .dec import dec_loss, dec_target
from .ema import CentroidEMA
from .layer import Clustering, RBFKMeansLayer
from .losses import commitment_loss, entropy, free_energy
from .schedule import SigmaScheduler, auto_sigma_min, critical_sigma

__all__ = [
    "CentroidEMA",
    "Clustering",
    "RBFKMeansLayer",
    "SigmaScheduler",
    "auto_sigma_min",
    "commitment_loss",
    "critical_sigma",
    "dec_loss",
    "dec_target",
    "entropy",
    "free_energy",
]
