r"""Temperatures: where annealing starts, how it cools, where it stops.

Critical temperature
--------------------
Above a critical ``sigma`` the only stable fixed point has every centre at the weighted
mean ``mu``. Linearise one fixed-point iteration around that collapsed state: perturb the
centres ``c_j = mu + e_j``; to first order the scores of point ``i`` change by
``dz_ij = 2 (x_i - mu) . e_j / sigma`` (the ``||x_i - mu||^2`` term is common to all ``j``
and drops out), the responsibilities by ``dR_i = J dz_i`` with ``J`` the Jacobian of the map
at the uniform distribution, and the M-step gives

    e_j  <-  (2 g / sigma) Cov_w (e_j - mean_l e_l),     Cov_w the weighted covariance,

where ``J = g (I - 11^T / k) / k``. The collapsed state loses stability when
``2 g lambda_max / sigma > 1``:

- softmax: ``J = diag(p) - p p^T = (I - 11^T/k) / k``, so ``g = 1`` and
  ``sigma_c = 2 lambda_max`` (Rose's deterministic annealing);
- entmax15: with ``s = sqrt(p)``, ``J = diag(s) - s s^T / sum(s)``; at ``p = 1/k`` this is
  ``(I - 11^T/k) / sqrt(k)``, so ``g = sqrt(k)`` and ``sigma_c = 2 sqrt(k) lambda_max``.

On the sphere (``metric="cosine"``, unit rows, centres renormalised by every M-step) the
collapsed state is the mean direction ``u = m / r``, ``m`` the weighted mean of the rows and
``r = ||m||``. Perturb ``c_j = u + e_j`` with ``e_j`` tangent (``u . e_j = 0``); the scores
``<x_i, c_j> / sigma_cos`` change by ``<x_i, e_j> / sigma_cos``, and the M-step's sum
``W (m + (g / sigma_cos) S (e_j - mean_l e_l)) / k`` (``S`` the second moment of the rows)
is divided by its length ``W r / k`` when renormalised. Its tangent part is
``e_j <- (g / (sigma_cos r)) P Cov_w P (e_j - mean_l e_l)``, ``P = I - u u^T`` (``P m = 0``,
so ``P S P = P Cov_w P``). So ``sigma_c = g lambda_max(P Cov_w P) / r`` in units of
``1 - cos``: the flat formula with the covariance of the tangent plane, amplified by
``1 / r`` (a spread-out direction field splits hotter), and twice that in the squared
distances ``||x - c||^2 = 2 (1 - cos)`` the fit runs on (:func:`sphere_lambda`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from .frame import squared_in_fit_units
from .memory import covariance_fits
from .moments import (
    data_largest_eigenvalue,
    largest_eigenvalue,
    weighted_covariance,
)
from .reducer import LOCAL, Reducer

#: ``sigma0="auto"`` starts this far above the critical temperature.
SIGMA0_MARGIN = 1.1
#: ``sigma_min="auto"`` is this fraction of the softmax critical temperature ...
SIGMA_MIN_RATIO = 1e-4
#: ... unless the cells are still hot there: the temperature is above this fraction of
#: their mean squared radius, the inertia per weight. The critical temperature is the
#: data's scale, the cells' is that over ``k^(2/d)`` or so, and at many centres a floor
#: fixed in the first ends the annealing while most points are soft (see
#: :func:`colder_temperatures`).
CELL_RATIO = 0.25
#: How far below ``sigma_min="auto"`` a fit whose cells are still hot may go on cooling.
COLD_EXTENSION = 1e-4
#: Annealing spends enough fixed-point iterations per temperature that the temperature
#: falls by at most this factor per iteration (see :func:`iterations_per_temperature`).
COOLING_PER_ITERATION = 0.8


def sphere_lambda(cov: torch.Tensor, mean: torch.Tensor) -> float:
    """The ``lambda_max`` a cosine fit's temperatures use: ``lambda_max(P Cov_w P) / r``
    (module docstring), ``r`` the length of the rows' mean, floored at ``1e-3`` (rows spread
    evenly over the sphere have no mean direction)."""
    r = float(mean.norm())
    u = mean / max(r, 1e-300)
    P = torch.eye(cov.shape[0], dtype=cov.dtype, device=cov.device) - torch.outer(u, u)
    return largest_eigenvalue(P @ cov @ P) / max(r, 1e-3)


def critical_temperature(lambda_max: float, n_clusters: int, assignment: str) -> float:
    """First critical ``sigma`` of the map (see the module docstring)."""
    if assignment == "softmax":
        return 2.0 * lambda_max
    if assignment == "entmax15":
        return 2.0 * math.sqrt(n_clusters) * lambda_max
    raise ValueError(f"no critical temperature for assignment={assignment!r}")


def grow_twin_linearly(
    cov: torch.Tensor,
    offset: torch.Tensor,
    schedule: list[float],
    assignment: str,
    *,
    floor: float,
    limit: float,
) -> tuple[int, torch.Tensor]:
    """Advance a lone centre's twin through the hottest temperatures without a data pass.

    While the centres are the weighted mean and one twin at a small offset ``e`` from it,
    one fixed-point iteration maps ``e`` to ``(2 g / sigma) Cov_w e`` to first order (the
    module docstring with ``k = 2``: ``g = sqrt(2)`` for entmax15, 1 for softmax), a power
    iteration of the covariance: a ``(d, d)`` product instead of a pass over the data.
    The solver's own rule for twins is kept: an offset that shrinks below ``floor`` is
    rescaled to it along its direction. Stops before the first temperature whose step
    would take the offset beyond ``limit``, where the pair leaves the linear regime and
    real iterations take over. Returns how many temperatures of ``schedule`` were so
    advanced, and the offset (the figures are in benchmarks/README.md).
    """
    gain = critical_temperature(1.0, 2, assignment)
    e = offset.to(cov.dtype)
    for t, sigma in enumerate(schedule):
        grown = (gain / sigma) * (cov @ e)
        norm = float(grown.norm())
        if not norm <= limit:
            return t, e
        e = grown * (floor / norm) if 0.0 < norm < floor else grown
    return len(schedule), e


def collapsed_objective(
    inertia: float, total_weight: float, sigma: float, assignment: str
) -> float:
    """``J_sigma`` with the centre and its twin at the weighted mean: every point splits
    its responsibility evenly between the two, so ``J = inertia - sigma W H(1/2, 1/2)``
    (Tsallis ``(4/3)(1 - 2^-1/2)`` for entmax15, Shannon ``log 2`` for softmax)."""
    entropy = (4.0 / 3.0) * (1.0 - 2.0**-0.5) if assignment == "entmax15" else math.log(2.0)
    return inertia - sigma * total_weight * entropy


def iterations_per_temperature(cooling: float) -> int:
    """Fixed-point iterations allowed at one temperature (fewer once the centres move less
    than ``tol``): as many as keep the cooling per iteration at ``COOLING_PER_ITERATION``
    or milder; 1 at the default ``cooling=0.8``, 4 at 0.5, 11 at 0.1.

    Annealing tracks a fixed point that moves as the temperature falls; converging at each
    temperature buys little, since the next one moves it again; a coarser schedule takes
    larger steps and needs more iterations to catch up (measured in benchmarks/README.md).
    """
    if not 0.0 < cooling < 1.0:
        raise ValueError(f"cooling must be in (0, 1), got {cooling}")
    ratio = math.log(cooling) / math.log(COOLING_PER_ITERATION)
    return max(1, math.ceil(ratio - 1e-9))


def geometric_schedule(
    sigma0: float, sigma_min: float, cooling: float, max_length: int | None = None
) -> list[float]:
    """``sigma0, cooling * sigma0, ...`` down to and including ``sigma_min``.

    ``max_length``: at most this many temperatures, the hottest ones (a fit spends at least
    one iteration per temperature, so one of ``max_iter`` iterations never sees more than
    ``max_iter``); it keeps extreme ratios or a cooling rate near 1 from building a list
    no fit could use.
    """
    if not 0.0 < cooling < 1.0:
        raise ValueError(f"cooling must be in (0, 1), got {cooling}")
    if sigma_min <= 0.0 or sigma0 <= 0.0:
        raise ValueError("sigma0 and sigma_min must be > 0")
    if sigma_min >= sigma0:
        return [sigma0]
    # Logs of each, not of the ratio: sigma_min / sigma0 can underflow to 0. The small
    # slack keeps a ratio that is an exact power of ``cooling`` (up to rounding) from
    # scheduling ``sigma_min`` twice.
    span = (math.log(sigma_min) - math.log(sigma0)) / math.log(cooling)
    steps = math.ceil(span - 1e-9)
    if max_length is not None and steps + 1 > max_length:
        return [sigma0 * cooling**t for t in range(max(1, max_length))]
    schedule = [sigma0 * cooling**t for t in range(steps)]
    schedule.append(sigma_min)
    return schedule


def colder_temperatures(
    params: Mapping[str, Any], temperatures: list[float], max_length: int
) -> list[float]:
    """The temperatures below ``sigma_min="auto"`` a fit goes on through while its cells
    are still hot (:data:`CELL_RATIO`; the annealing loop checks after each): the same
    cooling from the floor down to :data:`COLD_EXTENSION` times it, at most ``max_length``
    of them. None for an explicit ``sigma_min``, which is where annealing ends."""
    if params["sigma_min"] != "auto" or not temperatures:
        return []
    cooling, floor = float(params["cooling"]), temperatures[-1]
    below = geometric_schedule(floor, floor * COLD_EXTENSION, cooling, max_length + 1)
    return below[1:]


def schedule_for(
    params: Mapping[str, Any],
    grows: bool,
    X: torch.Tensor,
    w: torch.Tensor | None,
    mean: torch.Tensor,
    scale: float = 1.0,
    reducer: Reducer = LOCAL,
) -> tuple[list[float], torch.Tensor | None]:
    """The temperatures of a fit with the estimator's ``params`` (empty for hard or
    constant data), and the weighted covariance when an ``"auto"`` temperature needed it
    and it has no more entries than ``X`` (a grown fit's first twin uses it; wider data
    get ``lambda_max`` without it, see :func:`~rbfkm_engine.memory.covariance_fits`).

    ``X`` is in the fit's frame: the data times ``scale``, so explicit temperatures
    (squared distances) are taken times ``scale**2``; ``mean``: of ``X``, float64.
    ``reducer``: ``X`` is one shard of a data-parallel fit, and the statistics are every
    shard's (see :mod:`~rbfkm_engine.reducer`).
    ``grows``: the centres are grown from one centre and its twin, whose entmax15 critical
    temperature is that of 2 coincident centres, not of ``k``: starting at the latter would
    only spend iterations on a state that cannot split.
    """
    assignment, k = params["assignment"], int(params["n_clusters"])
    if assignment == "hard":
        return [], None
    needs_lambda = params["sigma0"] == "auto" or params["sigma_min"] == "auto"
    sphere = params.get("metric") == "cosine"
    cov = None
    lambda_max = 1.0
    if needs_lambda:
        n_total = sum(reducer.gather_ints(X.shape[0]))
        if covariance_fits(n_total, X.shape[1]):
            cov = weighted_covariance(X, w, mean, reducer)
            lambda_max = sphere_lambda(cov, mean) if sphere else largest_eigenvalue(cov)
        else:
            lambda_max = data_largest_eigenvalue(X, w, mean, reducer)
            if sphere:  # the flat covariance bounds the tangent plane's
                lambda_max /= max(float(mean.norm()), 1e-3)
        if sphere:
            cov = None  # the linearised first twin is the flat map's
        if lambda_max <= 0.0:
            return [], None  # constant data: nothing to anneal
    coincident = min(2, k) if grows else k
    sigma0 = (
        SIGMA0_MARGIN * critical_temperature(lambda_max, coincident, assignment)
        if params["sigma0"] == "auto"
        else squared_in_fit_units(float(params["sigma0"]), scale)
    )
    sigma_min = (
        SIGMA_MIN_RATIO * critical_temperature(lambda_max, k, "softmax")
        if params["sigma_min"] == "auto"
        else squared_in_fit_units(float(params["sigma_min"]), scale)
    )
    cooling, max_iter = float(params["cooling"]), int(params["max_iter"])
    schedule = geometric_schedule(sigma0, min(sigma_min, sigma0), cooling, max_length=max_iter)
    return schedule, cov
