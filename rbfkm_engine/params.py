"""Declarative constraints on :class:`~rbfkm_engine.RBFKMeans`'s parameters.

In the style of scikit-learn's ``_parameter_constraints``: each parameter maps to a list of
constraints and a value is valid when one of them accepts it. The table is the one
definition of what a parameter may be; the estimator checks its parameters against it and
the service derives its job schema from it, so the two cannot disagree.

This module imports neither torch nor numpy at import time (the service's API process
reads it without loading the engine).
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .device import DEVICE_HELP, is_device_name

#: The responsibility maps, by name.
ASSIGNMENTS = ("entmax15", "softmax", "hard")
#: The dissimilarities, by name: squared Euclidean distance, or ``1 - cos`` between
#: directions (spherical K-Means).
METRICS = ("euclidean", "cosine")
#: The compute precisions, by name.
DTYPES = ("float32", "float64")
#: Input precisions of the hard passes' distance products on CUDA, named as
#: ``torch.set_float32_matmul_precision`` names them: float32, TF32, bfloat16.
MATMUL_PRECISIONS = ("highest", "high", "medium")
#: The initialisations named by a string (an array of initial centres is also accepted).
INITS = ("k-means++", "random")


class InvalidParameterError(ValueError, TypeError):
    """A parameter value no constraint accepts (a ``ValueError`` and a ``TypeError``, as
    scikit-learn's: a wrong type and a wrong value are the same mistake to a caller)."""


@dataclass(frozen=True)
class Interval:
    """Numbers of ``kind`` between ``low`` and ``high`` (``None``: unbounded), finite.

    ``closed``: which ends belong to the interval. Booleans are never numbers here.
    """

    kind: Literal["int", "real"]
    low: float | None = None
    high: float | None = None
    closed: Literal["both", "left", "right", "neither"] = "both"

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool):
            return False
        kind = numbers.Integral if self.kind == "int" else numbers.Real
        if not isinstance(value, kind) or not math.isfinite(value):
            return False
        low_open = self.closed in ("right", "neither")
        high_open = self.closed in ("left", "neither")
        if self.low is not None and (value < self.low or (low_open and value == self.low)):
            return False
        return self.high is None or not (value > self.high or (high_open and value == self.high))

    def describe(self) -> str:
        noun = "an int" if self.kind == "int" else "a float"
        if self.low is not None and self.high is not None:
            left = "[" if self.closed in ("both", "left") else "("
            right = "]" if self.closed in ("both", "right") else ")"
            return f"{noun} in {left}{bound_text(self.low)}, {bound_text(self.high)}{right}"
        if self.low is not None:
            sign = ">=" if self.closed in ("both", "left") else ">"
            return f"{noun} {sign} {bound_text(self.low)}"
        if self.high is not None:
            sign = "<=" if self.closed in ("both", "right") else "<"
            return f"{noun} {sign} {bound_text(self.high)}"
        return f"a finite {noun[2:]}" if self.kind == "real" else noun


@dataclass(frozen=True)
class Options:
    """One of the given strings."""

    values: tuple[str, ...]

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) and value in self.values

    def describe(self) -> str:
        return " or ".join(repr(value) for value in self.values)


@dataclass(frozen=True)
class DeviceName:
    """A device: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or a ``torch.device``.

    Only the spelling is checked here; whether the machine has it is checked at fit.
    """

    def accepts(self, value: Any) -> bool:
        if isinstance(value, str):
            return is_device_name(value)
        torch = sys.modules.get("torch")
        return torch is not None and isinstance(value, torch.device)

    def describe(self) -> str:
        return DEVICE_HELP


@dataclass(frozen=True)
class ArrayLike:
    """An array of initial centres (its shape is checked against the data at fit)."""

    def accepts(self, value: Any) -> bool:
        return hasattr(value, "shape") or isinstance(value, list | tuple)

    def describe(self) -> str:
        return "an array of shape (n_clusters, n_features)"


@dataclass(frozen=True)
class RandomStateInstance:
    """A ``numpy.random.RandomState``."""

    def accepts(self, value: Any) -> bool:
        numpy = sys.modules.get("numpy")
        return numpy is not None and isinstance(value, numpy.random.RandomState)

    def describe(self) -> str:
        return "a numpy RandomState"


@dataclass(frozen=True)
class Boolean:
    """``True`` or ``False``."""

    def accepts(self, value: Any) -> bool:
        return isinstance(value, bool)

    def describe(self) -> str:
        return "a bool"


@dataclass(frozen=True)
class NoneValue:
    """``None`` (the parameter's automatic choice)."""

    def accepts(self, value: Any) -> bool:
        return value is None

    def describe(self) -> str:
        return "None"


Constraint = Interval | Options | DeviceName | ArrayLike | RandomStateInstance | Boolean | NoneValue

#: A temperature: a finite float > 0 or ``"auto"`` (derived from the data).
TEMPERATURE: list[Constraint] = [Interval("real", 0.0, None, closed="neither"), Options(("auto",))]

#: What each of ``RBFKMeans``'s parameters may be.
PARAMETER_CONSTRAINTS: dict[str, list[Constraint]] = {
    "n_clusters": [Interval("int", 1, None), Options(("auto",))],
    "max_clusters": [Interval("int", 2, None)],
    "assignment": [Options(ASSIGNMENTS)],
    "metric": [Options(METRICS)],
    "sigma0": TEMPERATURE,
    "sigma_min": TEMPERATURE,
    "cooling": [Interval("real", 0.0, 1.0, closed="neither")],
    "overshoot": [Interval("real", 1.0, 4.0)],
    "max_iter": [Interval("int", 1, None)],
    "tol": [Interval("real", 0.0, None)],
    "init": [Options(INITS), ArrayLike()],
    "n_init": [Interval("int", 1, None)],
    "device": [DeviceName()],
    "dtype": [Options(DTYPES)],
    "matmul_precision": [Options(MATMUL_PRECISIONS)],
    "chunk_size": [Interval("int", 1, None), NoneValue()],
    "random_state": [Interval("int", 0, 2**32 - 1), RandomStateInstance(), NoneValue()],
    "verbose": [Boolean(), Interval("int", 0, None)],
}


def describe(constraints: list[Constraint]) -> str:
    """What the constraints accept, in words (for error messages)."""
    return " or ".join(constraint.describe() for constraint in constraints)


def validate_params(
    params: Mapping[str, Any],
    constraints: Mapping[str, list[Constraint]] = PARAMETER_CONSTRAINTS,
) -> None:
    """Raise :class:`InvalidParameterError` naming the first parameter no constraint
    accepts, what it may be and what it was."""
    for name, value in params.items():
        allowed = constraints.get(name)
        if allowed is None:
            raise InvalidParameterError(f"unknown parameter {name!r}")
        if not any(constraint.accepts(value) for constraint in allowed):
            plain = isinstance(value, str | numbers.Number | None)
            shown = repr(value) if plain else f"a {type(value).__name__}"
            raise InvalidParameterError(f"{name} must be {describe(allowed)}; got {shown}")


def bound_text(value: float) -> str:
    """A bound as a message writes it: integers without a decimal point."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 2**53 else repr(value)
