"""The nearest centre of each row of a distance block, exactly as ``argmin`` finds it.

Arg-reductions are much slower than value reductions on the CPU, so the labels come from
a row minimum and a check: a candidate label per row, kept where the block at it equals
the row minimum, and an ``argmin`` for the few rows where it does not. Candidates come
from the previous pass (a hint) or from one integer row minimum of the distances with the
column index written into their low bits (:func:`packed_argmin`).
"""

from __future__ import annotations

import torch

#: :func:`nearest` gathers the changed rows for their ``argmin`` while they are at most
#: ``1 / _GATHER_SHARE`` of the block.
_GATHER_SHARE = 8
#: The integer type :func:`packed_argmin` reads a float's bits as.
_SAME_SIZE_INT = {torch.float32: torch.int32, torch.float64: torch.int64}
#: Above ``2^_MAX_PACKED_BITS`` centres the packed candidates would keep too few
#: mantissa bits to be worth checking: :func:`packed_argmin` falls back to ``argmin``.
_MAX_PACKED_BITS = 16


def nearest(
    D: torch.Tensor,
    row_offset: torch.Tensor | None,
    hint: torch.Tensor | None = None,
    scratch: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Row minimum of ``D``, the true nearest squared distance and the argmin.

    Arg-reductions are much slower than value reductions on the CPU, so the
    labels come from a row minimum and a check instead: a candidate label per row, kept
    where ``D`` at it equals the row minimum, and an ``argmin`` for the few rows where it
    does not. The candidates are ``hint`` (a previous label per row, the last
    iteration's: between fixed-point iterations few labels change; ties keep the hint),
    else :func:`packed_argmin`'s (ties go to the lowest index, as ``argmin``'s). When many
    hinted rows changed, they take :func:`packed_argmin`'s candidates first.

    ``scratch``: a buffer of at least ``D.numel()`` elements of ``D``'s dtype for
    :func:`packed_argmin` (allocated when ``None``).
    """
    if D.device.type != "cpu" and hint is None:  # no hint to check: argmin is fast there
        d_min, labels = D.min(dim=1)
    else:
        d_min = D.amin(dim=1)
        labels = packed_argmin(D, row_offset, scratch) if hint is None else hint.clone()
        off = _off_minimum(D, d_min, labels)
        stale = torch.nonzero(off).squeeze(1)
        if hint is not None and stale.shape[0] * _GATHER_SHARE > D.shape[0]:
            labels = torch.where(off, packed_argmin(D, row_offset, scratch), labels)
            stale = torch.nonzero(_off_minimum(D, d_min, labels)).squeeze(1)
        if stale.numel():
            labels[stale] = D[stale].argmin(dim=1)
    true_min = d_min if row_offset is None else (d_min + row_offset).clamp_min_(0.0)
    return d_min, true_min, labels


def _off_minimum(D: torch.Tensor, d_min: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mask of the rows where ``D`` at ``labels`` is above the row minimum ``d_min``."""
    return D.gather(1, labels.unsqueeze(1)).squeeze(1) > d_min


def packed_argmin(
    D: torch.Tensor, row_offset: torch.Tensor | None = None, scratch: torch.Tensor | None = None
) -> torch.Tensor:
    """Candidate row argmins of ``D`` by one integer value reduction.

    The magnitudes of floats order as their bit patterns (sign bit cleared) do as
    integers, so writing the column index into the low ``b = ceil(log2 k)`` bits of
    ``|D + row_offset|`` (the true squared distances, up to rounding about 0) makes the
    row minimum carry its column: the index of the smallest value up to a relative
    ``2^(b - 23)`` in float32, the lowest one among values that share their other bits.

    A candidate, not the argmin: :func:`nearest` keeps it only where ``D`` at it equals the
    row minimum. That check makes the result exact, ties included: the columns holding the
    minimum share every bit but the index bits, so if the candidate is one of them it is
    the lowest, the one ``argmin`` returns.
    """
    m, k = D.shape
    bits = max(1, (k - 1).bit_length())
    if bits > _MAX_PACKED_BITS or D.dtype not in _SAME_SIZE_INT:
        return D.argmin(dim=1)
    if scratch is None:
        keys = torch.empty((m, k), dtype=D.dtype, device=D.device)
    else:
        keys = scratch.view(-1)[: m * k].view(m, k)
    if row_offset is None:
        keys.copy_(D)
    else:
        torch.add(D, row_offset.unsqueeze(1), out=keys)
    as_int = keys.view(_SAME_SIZE_INT[D.dtype])
    magnitude_bits = (1 << (8 * D.element_size() - 1)) - 1
    columns = torch.arange(k, dtype=as_int.dtype, device=D.device)
    as_int.bitwise_and_(magnitude_bits & -(1 << bits)).bitwise_or_(columns)
    return as_int.amin(dim=1).bitwise_and_((1 << bits) - 1).long()
