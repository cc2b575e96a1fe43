"""The fit's frame: the data scaled by a power of two and centred, and back.

A fit runs on ``(X * scale) - origin``:

- ``scale`` is 1, or the power of two that brings ``max |x|`` into ``[0.5, 1)`` when the
  squared distances and their sums over points would overflow or underflow the compute
  dtype. A power of two scales every operation's rounding with it in binary floating
  point: the scaled fit is the fit, reported in the data's units.
- ``origin`` is the weighted mean when it is far from the origin relative to the data's
  spread (the GEMM form of the distances would lose every digit to ``||x||^2`` in
  float32), else 0: centring near the origin would cost a copy of ``X`` for little.

Temperatures, inertias and objectives are squared distances: they go back to the data's
units divided by ``scale`` twice. Where a copy of ``X`` was made anyway (another dtype or
device), scaling and centring happen in place, so a fit holds one copy of ``X`` at most.
When ``X`` is a memory-mapped file (``np.memmap``, data that may exceed memory) the copy
is itself file-backed, an unnamed temporary file written block by block: the fit's own
memory stays bounded and the page cache holds the rows, as for the file.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .blocks import iter_chunks
from .distances import squared_norms
from .moments import weighted_mean
from .progress import Callback, FitProgress
from .reducer import LOCAL, Reducer

#: The data are centred when their mean's squared norm exceeds this times the total
#: variance (see :func:`centring_origin`).
CENTRE_ABOVE = 0.25


def max_abs(X: torch.Tensor) -> float:
    """``max |x_ij|`` without an ``(n, d)`` temporary; NaN or inf when some value is."""
    low, high = (float(value) for value in torch.aminmax(X))
    return math.nan if math.isnan(low) or math.isnan(high) else max(-low, high)


def power_of_two_scale(max_abs: float, dtype: torch.dtype) -> float:
    """1, or the power of two that brings ``max_abs`` into ``[0.5, 1)`` when it lies outside
    ``[2^-m, 2^m]``, ``m`` a third of the dtype's exponent range (float32: 2^42, about
    4e12).

    Beyond it the squared distances and their sums over points overflow the dtype (or
    underflow below it), so such data are fitted scaled. A power of two scales every
    operation's rounding with it in binary floating point: the scaled fit is the fit, and
    data of ordinary size are not touched at all. The scale stays a finite float: for
    float64 data of subnormal size it is ``2^1023``, which brings them above ``2^-52``,
    still well inside the safe range.
    """
    limit = 2.0 ** (math.frexp(torch.finfo(dtype).max)[1] // 3)
    if max_abs == 0.0 or not math.isfinite(max_abs) or 1.0 / limit <= max_abs <= limit:
        return 1.0
    _, exponent = math.frexp(max_abs)  # max_abs = m 2^exponent, 0.5 <= m < 1
    return math.ldexp(1.0, min(-exponent, sys.float_info.max_exp - 1))


def scaled(Xt: torch.Tensor, source: Any, scale: float) -> torch.Tensor:
    """``Xt * scale``: ``Xt`` itself when ``scale`` is 1, in place when it is a copy made
    here (as :func:`centred`)."""
    if scale == 1.0:
        return Xt
    if may_share_memory(Xt, source):
        if is_mapped_file(source, Xt):
            return file_backed(Xt, lambda block: times_power_of_two(block, scale))
        Xt = Xt.clone()
    return times_power_of_two(Xt, scale)


def times_power_of_two(t: torch.Tensor, scale: float) -> torch.Tensor:
    """``t *= scale`` (a power of two) in place, in two halves: float32 data near its
    smallest subnormals needs a scale up to ``2^149``, beyond float32's range as one
    factor (it would round to inf); each half is a float32 and each product exact."""
    exponent = math.frexp(scale)[1] - 1  # scale = 2^exponent
    half = exponent // 2
    return t.mul_(math.ldexp(1.0, half)).mul_(math.ldexp(1.0, exponent - half))


def squared_in_fit_units(value: float, scale: float) -> float:
    """A squared distance (a temperature) of the data's units in the scaled fit's, kept a
    positive finite float: far outside the data's scale it would round to 0 or inf."""
    return min(max(value * scale * scale, sys.float_info.min), sys.float_info.max)


def squared_in_data_units(value: float, scale: float) -> float:
    """A squared distance (an inertia, a temperature) of the scaled fit in the data's
    units: divided by ``scale`` twice, as its square may underflow."""
    return value / scale / scale


def unscaled_record(record: dict[str, float], scale: float) -> dict[str, float]:
    """A ``history_`` record in the data's units: temperatures and energies are squared
    distances."""
    if scale == 1.0:
        return record
    squared = ("sigma", "objective", "inertia")
    return {
        key: squared_in_data_units(value, scale) if key in squared else value
        for key, value in record.items()
    }


def unscaled_callback(callback: Callback | None, scale: float) -> Callback | None:
    """``callback`` told the temperature and objective in the data's units."""
    if callback is None or scale == 1.0:
        return callback

    def told(info: FitProgress) -> bool | None:
        sigma = squared_in_data_units(info.sigma, scale)
        objective = squared_in_data_units(info.objective, scale)
        return callback(dataclasses.replace(info, sigma=sigma, objective=objective))

    return told


def weighted_total(values: torch.Tensor, w: torch.Tensor | None) -> float:
    """``sum_i w_i v_i`` in float64 (``w = 1`` when ``None``)."""
    return float(values.sum(dtype=torch.float64) if w is None else (w.double() * values).sum())


def centred(Xt: torch.Tensor, source: Any, mean: torch.Tensor) -> torch.Tensor:
    """``Xt - mean``, in place when ``Xt`` is a copy made here and not the caller's data;
    ``Xt`` itself when ``mean`` is 0 (a fit that did not centre).

    Converting the input (another dtype or device, a list, a strided array) already copied
    it; centring that copy in place keeps fit's memory at one copy of ``X``.
    """
    if not bool(mean.any()):
        return Xt
    mean = mean.to(Xt.dtype)
    if may_share_memory(Xt, source):
        if is_mapped_file(source, Xt):
            return file_backed(Xt, lambda block: block.sub_(mean))
        return Xt - mean
    return Xt.sub_(mean)


#: Rows per block when writing a file-backed copy.
_COPY_ROWS = 65536


def is_mapped_file(source: Any, Xt: torch.Tensor) -> bool:
    """Whether the caller's data are a memory-mapped file read on the CPU."""
    return isinstance(source, np.memmap) and Xt.device.type == "cpu"


def file_backed(Xt: torch.Tensor, change: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """A copy of ``Xt`` with ``change`` applied in place to each block of rows, in an
    unnamed temporary file mapped into memory (``tempfile``'s directory: ``TMPDIR``),
    removed by the system once the tensor is gone."""
    with tempfile.TemporaryFile(prefix="rbfkm-fit-") as handle:
        dtype = torch.empty((), dtype=Xt.dtype).numpy().dtype
        copy = np.memmap(handle, dtype=dtype, mode="w+", shape=tuple(Xt.shape))
    out = torch.from_numpy(copy)
    for rows in iter_chunks(Xt.shape[0], _COPY_ROWS):
        out[rows] = change(Xt[rows].clone())
    return out


def may_share_memory(Xt: torch.Tensor, source: Any) -> bool:
    """Whether ``Xt`` may be (a view of) the caller's ``source`` (conservative)."""
    if isinstance(source, torch.Tensor):
        if source.device != Xt.device:
            return False
        own = source.untyped_storage()
        start, size = own.data_ptr(), own.nbytes()
        ptr = Xt.untyped_storage().data_ptr()
        return start <= ptr < start + max(size, 1)
    if isinstance(source, np.ndarray):
        return Xt.device.type == "cpu" and bool(np.may_share_memory(source, Xt.numpy()))
    # Lists are always copied; other containers (data frames, ...) may hand out views.
    return not isinstance(source, list | tuple)


@dataclasses.dataclass
class Framed:
    """Data moved into the fit's frame, with what the fit needs to know of it."""

    X: torch.Tensor  # (X * scale) - origin, in the compute dtype
    x_sq: torch.Tensor  # its rows' squared norms
    scale: float
    origin: torch.Tensor  # float64, in scaled units
    mean: torch.Tensor  # the weighted mean, float64, in scaled units (not centred)
    spread: float  # the weighted mean squared distance to the mean (the total variance)


#: Squared distances on the unit sphere are twice the cosine distance ``1 - cos``: a cosine
#: fit runs on them and reports in cosine units, as if its squared scale were 2.
COSINE_SCALE = math.sqrt(2.0)


def onto_sphere(
    Xt: torch.Tensor, source: Any, w: torch.Tensor | None, reducer: Reducer = LOCAL
) -> Framed:
    """``Xt`` with every row divided by its norm (a cosine fit's frame: neither scaled
    nor centred); a ``ValueError`` names the first row of norm 0, which has no direction."""
    norms = Xt.norm(dim=1, keepdim=True)
    zero = torch.nonzero(norms.squeeze(1) == 0)
    if zero.numel():
        raise ValueError(
            f"row {int(zero[0])} of X has norm 0 and no direction, so metric='cosine' "
            "cannot place it: drop such rows or use metric='euclidean'."
        )
    Xt = Xt / norms if may_share_memory(Xt, source) else Xt.div_(norms)
    mean = weighted_mean(Xt, w, reducer)
    spread = max(1.0 - float(mean.square().sum()), 0.0)
    return Framed(Xt, squared_norms(Xt), 1.0, torch.zeros_like(mean), mean, spread)


def into_fit_frame(
    Xt: torch.Tensor,
    source: Any,
    w: torch.Tensor | None,
    top: float,
    reducer: Reducer = LOCAL,
) -> Framed:
    """Scale ``Xt`` (converted from the caller's ``source``; ``top``: its ``max |x|``) by
    a power of two where needed and centre it where its mean is far from the origin.

    Over the shards of a data-parallel fit (``reducer``; ``top`` the largest over every
    shard) the mean and spread are every shard's, so every rank gets the same frame.
    """
    scale = power_of_two_scale(top, Xt.dtype)
    Xt = scaled(Xt, source, scale)
    mean = weighted_mean(Xt, w, reducer)
    weight = Xt.shape[0] if w is None else float(w.double().sum())
    x_sq = squared_norms(Xt)
    weight, squares = reducer.sum_floats(weight, weighted_total(x_sq, w))
    spread = squares / weight - float(mean.square().sum())
    origin = torch.zeros_like(mean)
    if float(mean.square().sum()) > CENTRE_ABOVE * spread:
        # Far from the origin the GEMM form of the distances loses every digit to
        # ||x||^2 in float32: centre the data, as scikit-learn does. Near it, centring
        # would cost a copy of X and gain little: the rounding of the distances grows
        # with ||x||^2 = ||x - mean||^2 + ||mean||^2 + ..., at most 1 + CENTRE_ABOVE
        # times the centred one's.
        origin = mean
        Xt = centred(Xt, source, origin)
        x_sq = squared_norms(Xt)
        spread = reducer.sum_floats(weighted_total(x_sq, w))[0] / weight
    return Framed(Xt, x_sq, scale, origin, mean, spread)
