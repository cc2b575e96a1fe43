"""Temperature-scaled scores ``-(E - min_j E) / sigma`` with finite gradients at any sigma.

Dividing by ``sigma = exp(log_sigma)`` the plain way differentiates as ``-E / sigma^2``:
``sigma^2`` underflows once ``sigma`` is about the square root of the dtype's smallest
normal number (``1e-19`` in float32), and the gradient of ``log_sigma`` becomes ``inf`` or
NaN. Here the gaps are scaled by a *detached* ``1 / sigma``, and the temperature's gradient
enters through a factor ``exp(log_sigma.detach() - log_sigma)``, equal to 1: its gradient
is ``-score``, so ``d loss / d log_sigma = -sum(grad_score * score)`` is formed from the
scores themselves, which are never huge (see :data:`SCORE_FLOOR`) nor tiny.
"""

from __future__ import annotations

import math

import torch

#: Scores are clamped at ``-SCORE_FLOOR``: ``exp(-1000)`` is 0 in float64 and entmax15 is
#: 0 below a row's best score minus 2, so the clamp changes no responsibility and no
#: gradient, and keeps the scores (and the sums the maps form of them) finite.
SCORE_FLOOR = 1000.0


def scaled_scores(e: torch.Tensor, log_sigma: torch.Tensor) -> torch.Tensor:
    """``-(e - min_j e) / sigma``, each row's best score exactly 0.

    ``log_sigma`` is clamped below at the log of the dtype's smallest normal number (its
    gradient is 0 beyond): a smaller ``sigma`` has no ``1 / sigma`` in the dtype.
    """
    gap = e - e.amin(dim=-1, keepdim=True).detach()
    log_sigma = log_sigma.to(gap.dtype).clamp_min(math.log(torch.finfo(gap.dtype).tiny))
    fixed = log_sigma.detach()
    scaled = (gap * torch.exp(-fixed)).clamp_max(SCORE_FLOOR)
    return -scaled * torch.exp(fixed - log_sigma)
