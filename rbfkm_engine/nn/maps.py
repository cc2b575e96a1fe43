"""The layer's responsibility maps: scores ``(..., n, k)`` -> rows on the simplex.

- ``"softmax"``: the Gaussian RBF responsibilities (Shannon entropy);
- ``"entmax15"``: sparse, exact (Tsallis-1.5 entropy), from the ``entmax`` package;
- ``"hard"``: one-hot ``argmin_j D_ij``, no gradient through the assignment;
- ``"hard_st"``: the straight-through estimator: the one-hot rows forward, the softmax's
  gradient backward (``hard + (soft - soft.detach())``, exactly one-hot in value).
"""

from __future__ import annotations

import torch
from entmax import entmax15

from ..params import ASSIGNMENTS

#: The layer's maps: the engine's and the straight-through one.
LAYER_ASSIGNMENTS = (*ASSIGNMENTS, "hard_st")
#: Maps whose forward value is one-hot.
HARD_ASSIGNMENTS = ("hard", "hard_st")


def one_hot_argmin(d: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One-hot rows of ``argmin`` over the last dimension (ties: the lowest index), built by
    a comparison (no ``one_hot`` op: it exports to ONNX and compiles as is)."""
    labels = d.argmin(dim=-1, keepdim=True)
    columns = torch.arange(d.shape[-1], device=d.device)
    return (columns == labels).to(dtype)


def responsibilities(z: torch.Tensor, d: torch.Tensor, assignment: str) -> torch.Tensor:
    """The map ``assignment`` of scores ``z``; ``d``: the dissimilarities the hard maps
    take their ``argmin`` of (the scores of far centres are clamped and may tie)."""
    if assignment == "softmax":
        return torch.softmax(z, dim=-1)
    if assignment == "entmax15":
        return entmax15(z, dim=-1)
    hard = one_hot_argmin(d, z.dtype)
    if assignment == "hard":
        return hard
    soft = torch.softmax(z, dim=-1)
    return hard + (soft - soft.detach())
