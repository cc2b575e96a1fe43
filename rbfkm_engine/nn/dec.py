"""DEC's self-training (Xie et al., 2016): a sharpened target and a KL loss.

With the Student-t kernel at ``sigma = 1`` the layer's softmax is DEC's soft assignment
``q``; the target ``p_ij ∝ q_ij^2 / f_j``, ``f_j = sum_i q_ij`` the soft cluster sizes,
puts more weight on confident assignments and evens out the clusters' sizes; training
minimises ``KL(P || Q)`` (IDEC adds a reconstruction loss).
"""

from __future__ import annotations

import torch


def dec_target(q: torch.Tensor) -> torch.Tensor:
    """DEC's target distribution of ``q`` ``(..., n, k)``, sizes taken over the ``n``
    points of each batch; detached (a fixed target for the KL loss)."""
    q = q.detach()
    weight = q * q / q.sum(dim=-2, keepdim=True).clamp_min(torch.finfo(q.dtype).tiny)
    return weight / weight.sum(dim=-1, keepdim=True)


def dec_loss(q: torch.Tensor, target: torch.Tensor | None = None) -> torch.Tensor:
    """``KL(P || Q)`` summed over the clusters and averaged over the points; ``target``
    defaults to :func:`dec_target` of ``q`` (DEC refreshes it every few batches: pass the
    one kept). Terms with ``p = 0`` are 0, with a 0 gradient."""
    p = dec_target(q) if target is None else target.to(q.dtype)
    tiny = torch.finfo(q.dtype).tiny
    log_ratio = torch.log(p.clamp_min(tiny)) - torch.log(q.clamp_min(tiny))
    terms = torch.where(p > 0, p * log_ratio, torch.zeros_like(q))
    return terms.sum(dim=-1).mean()
