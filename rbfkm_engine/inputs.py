"""Checks and conversions of what a caller hands the estimator: data, weights, centres.

Every message says what is wrong and what to change. Arrays that are already tensors stay
on their device (no trip through the host); everything else has passed scikit-learn's
``validate_data`` before it gets here.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import torch

from .frame import max_abs


def check_tensor(X: torch.Tensor) -> None:
    """Raise ``ValueError`` unless ``X`` is a non-empty 2D real tensor of finite values."""
    if X.ndim != 2:
        raise ValueError(f"Expected a 2D tensor, got shape {tuple(X.shape)}")
    if X.is_complex() or X.dtype == torch.bool:
        raise ValueError(f"X must be real-valued, got dtype {X.dtype}")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"X must be non-empty, got shape {tuple(X.shape)}")
    # The extremes are finite iff every value is (NaN propagates): no (n, d) mask, and no
    # float64 copy, which a float64 sum of float32 values makes.
    if not math.isfinite(max_abs(X)):
        raise ValueError("Input X contains NaN or infinity; clean or impute it first.")


def array_input(array: np.ndarray, device: torch.device, dtype: torch.dtype | None) -> torch.Tensor:
    """A validated float array as a tensor on ``device`` (``dtype=None``: the array's own
    float precision)."""
    if dtype is None:
        dtype = torch.float64 if array.dtype == np.float64 else torch.float32
    with warnings.catch_warnings():
        # A read-only array (a memory-mapped file) is fine: fit and predict never write
        # to it (centring, where they centre, makes a copy).
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        tensor = torch.from_numpy(array)
    return tensor.to(device=device, dtype=dtype)


def is_empty_shard(X: Any) -> bool:
    """Whether ``X`` is a 2D array or tensor without rows (a shard of a data-parallel fit
    may be)."""
    shape = getattr(X, "shape", None)
    return shape is not None and len(shape) == 2 and shape[0] == 0 and shape[1] > 0


def sample_weights(sample_weight: Any, X: torch.Tensor, shard: bool = False) -> torch.Tensor | None:
    """``sample_weight`` as a tensor beside ``X`` (a scalar is every point's weight);
    finite, non-negative and not all zero (``shard``: ``X`` is one shard of a
    data-parallel fit, whose weights may all be zero as long as some shard's are not)."""
    if sample_weight is None:
        return None
    if isinstance(sample_weight, torch.Tensor):
        w = sample_weight.detach().to(device=X.device, dtype=X.dtype)
    else:
        array = np.asarray(sample_weight, dtype=np.float64)
        if array.ndim == 0:
            array = np.full(X.shape[0], float(array))
        w = torch.from_numpy(np.ascontiguousarray(array)).to(device=X.device, dtype=X.dtype)
    if w.ndim != 1 or w.shape[0] != X.shape[0]:
        raise ValueError(f"sample_weight.shape == {tuple(w.shape)}, expected ({X.shape[0]},)")
    if not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
        raise ValueError("sample_weight must be finite and non-negative")
    if not shard:
        check_total_weight(float(w.sum()))
    return w


def check_total_weight(total: float) -> None:
    """Raise ``ValueError`` unless the sample weights' total is positive."""
    if total <= 0:
        raise ValueError(
            "Sample weights must not be all zero: give at least one sample a positive weight"
        )


def init_array(init: Any, n_clusters: int, n_features: int, device: torch.device) -> torch.Tensor:
    """Initial centres given as an array, in float64 on ``device``, shape and values
    checked."""
    if isinstance(init, torch.Tensor):
        C = init.detach().to(device=device, dtype=torch.float64)
    else:
        C = torch.as_tensor(np.asarray(init, dtype=np.float64), device=device)
    if C.shape != (n_clusters, n_features):
        raise ValueError(
            f"init array must have shape (n_clusters, n_features) = "
            f"({n_clusters}, {n_features}), got {tuple(C.shape)}"
        )
    if not bool(torch.isfinite(C).all()):
        raise ValueError("init array contains NaN or infinity")
    return C
