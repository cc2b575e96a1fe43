"""The engine's parameters as jobs carry them: one model, derived from the engine's table.

:data:`rbfkm_engine.params.PARAMETER_CONSTRAINTS` says what each of ``RBFKMeans``'s
parameters may be. This module turns that table into pydantic fields (types, bounds, enums:
what the OpenAPI document shows and the API checks), adding only what is the service's own
choice: which parameters a job may set (:data:`EXPOSED`, :data:`HIDDEN`), caps that bound a
job's cost, defaults and descriptions. The API validates a request with these fields
(``service.schemas.JobCreate``) and the worker turns a stored job back into the estimator's
arguments with the same model (:func:`engine_params`), so the two cannot disagree.

The defaults are written here rather than read from ``RBFKMeans.__init__``: importing the
estimator imports torch, which the API process does not load. ``tests/service/
test_params.py`` fails if they differ from the engine's, or if a parameter is neither
exposed nor hidden.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from rbfkm_engine.device import DEVICE_HELP, DEVICE_KINDS, DEVICE_PATTERN, is_device_name
from rbfkm_engine.params import (
    PARAMETER_CONSTRAINTS,
    ArrayLike,
    Boolean,
    Constraint,
    DeviceName,
    Interval,
    NoneValue,
    Options,
    bound_text,
)


@dataclass(frozen=True)
class Exposed:
    """How a job sets one engine parameter: its description, its default (none: required)
    and the service's own upper bound, tighter than the engine's."""

    description: str
    default: Any = PydanticUndefined
    cap: float | None = None


#: The engine parameters a job may set, in the order the API documents them.
EXPOSED: dict[str, Exposed] = {
    "n_clusters": Exposed(
        "k, the number of clusters, at most the dataset's n_samples; or `auto`: chosen "
        "from the annealing path of one fit (at most `max_clusters`)."
    ),
    "max_clusters": Exposed("With `n_clusters: auto`, the largest k it may choose.", 10, cap=1000),
    "assignment": Exposed(
        "Responsibilities: `entmax15` (sparse soft), `softmax` (dense soft) or `hard` "
        "(Lloyd's K-Means).",
        "entmax15",
    ),
    "metric": Exposed(
        "`euclidean` (squared distances) or `cosine` (`1 - cos`: spherical K-Means, rows "
        "compared by direction).",
        "euclidean",
    ),
    "sigma0": Exposed("Starting temperature; `auto` derives it from the data.", "auto"),
    "sigma_min": Exposed("Final temperature; `auto` derives it from the data.", "auto"),
    "cooling": Exposed("Geometric cooling rate.", 0.8),
    "overshoot": Exposed(
        "Anneal to up to this many times n_clusters centres, then group those cells into "
        "n_clusters by their masses (1: anneal to n_clusters): more time for a lower "
        "inertia on a continuum (colours, patches) at large k.",
        1.0,
    ),
    # A job's cost grows with these; the caps keep one request from holding a worker for days.
    "max_iter": Exposed(
        "Iterations of annealing and the Lloyd finish; the local search may use twice as "
        "many more, in which an unconverged finish goes on first.",
        300,
        cap=100_000,
    ),
    "tol": Exposed("Convergence tolerance on centre movement.", 1e-4),
    "init": Exposed(
        "`k-means++`, `random`, or initial centres (n_clusters rows of n_features).",
        "k-means++",
    ),
    "n_init": Exposed("Runs from different seeds; the best is kept.", 1, cap=1000),
    "random_state": Exposed("Seed: the same seed gives the same result.", None),
    "device": Exposed(
        f"{DEVICE_HELP}; a device the worker's machine lacks runs on the worker's own.",
        "auto",
    ),
}

#: A job's parameters that are the service's, not the engine's: stored with the job (so
#: ``GET /v1/jobs/{id}`` shows them) and read by the worker, never passed to ``RBFKMeans``.
#: ``max_runtime_s``: the job's time limit per attempt, in seconds
#: (:func:`runtime_limit`; the API fills in the server's default, ``RBFKM_MAX_RUNTIME_S``);
#: ``callback_url``: the job's webhook (:mod:`service.webhooks`); ``parallel``: the
#: processes that fit it together (:mod:`service.parallel`); ``output``: where the worker
#: writes the results (:mod:`service.outputs`).
SERVICE_PARAMS: frozenset[str] = frozenset({"max_runtime_s", "callback_url", "parallel", "output"})

#: Engine parameters a job cannot set, and why.
HIDDEN: dict[str, str] = {
    "dtype": "the workers fit in float32; stored datasets are checked to fit its range",
    "chunk_size": "memory per block is the worker's concern, sized from its device",
    "matmul_precision": "the worker's speed setting; every fit ends on a float32 fixed point",
    "verbose": "a worker's log is not the client's; progress is reported on the job",
}


def capped(interval: Interval, cap: float | None) -> Interval:
    """``interval`` with its upper end lowered to ``cap`` (closed) where that is tighter."""
    if cap is None or (interval.high is not None and interval.high <= cap):
        return interval
    closed = "both" if interval.closed in ("both", "left") else "right"
    return dataclasses.replace(interval, high=cap, closed=closed)


def describe(constraint: Constraint) -> str:
    """What a constraint accepts, in the words of a JSON API (``null``, ``"auto"``)."""
    if isinstance(constraint, Interval):
        noun = "an integer" if constraint.kind == "int" else "a finite number"
        lower = {"both": ">=", "left": ">=", "right": ">", "neither": ">"}[constraint.closed]
        upper = {"both": "<=", "right": "<=", "left": "<", "neither": "<"}[constraint.closed]
        bounds = [f"{lower} {bound_text(constraint.low)}"] if constraint.low is not None else []
        if constraint.high is not None:
            bounds.append(f"{upper} {bound_text(constraint.high)}")
        return " ".join([noun, " and ".join(bounds)]).strip()
    if isinstance(constraint, Options):
        return " or ".join(json.dumps(value) for value in constraint.values)
    if isinstance(constraint, NoneValue):
        return "null"
    if isinstance(constraint, Boolean):
        return "true or false"
    return constraint.describe()


def _interval_type(interval: Interval) -> Any:
    """An int or float type bounded as ``interval`` says (ints strict: JSON integers only)."""
    bounds: dict[str, float] = {}
    if interval.low is not None:
        bounds["ge" if interval.closed in ("both", "left") else "gt"] = interval.low
    if interval.high is not None:
        bounds["le" if interval.closed in ("both", "right") else "lt"] = interval.high
    if interval.kind == "int":
        return Annotated[int, Field(strict=True, **{k: int(v) for k, v in bounds.items()})]
    return Annotated[float, Field(allow_inf_nan=False, **bounds)]


def _check_device(value: str) -> str:
    """Only the spelling: whether a worker's machine has the device is the worker's call."""
    if not is_device_name(value):
        raise ValueError(f"must be {DEVICE_HELP}")
    return value


def _json_type(constraint: Constraint) -> Any | None:
    """The pydantic type of what a JSON body can send for a constraint (None: nothing can,
    e.g. a ``numpy.random.RandomState``)."""
    if isinstance(constraint, Interval):
        return _interval_type(constraint)
    if isinstance(constraint, Options):
        return Literal[constraint.values]
    if isinstance(constraint, DeviceName):
        examples = [*DEVICE_KINDS, "cuda:1"]
        # The pattern for the document only: the validator's message is the friendlier one.
        schema = {"pattern": DEVICE_PATTERN}
        field = Field(examples=examples, json_schema_extra=schema)
        return Annotated[str, AfterValidator(_check_device), field]
    if isinstance(constraint, ArrayLike):
        return list[list[float]]
    if isinstance(constraint, Boolean):
        return bool
    if isinstance(constraint, NoneValue):
        return type(None)
    return None


def _one_message(constraints: list[Constraint]) -> BeforeValidator:
    """A validator that refuses a value no constraint accepts with one message, rather than
    one message per member of the union."""
    allowed = " or ".join(describe(constraint) for constraint in constraints)

    def check(value: Any) -> Any:
        if not any(constraint.accepts(value) for constraint in constraints):
            raise ValueError(f"must be {allowed}; got {value!r}")
        return value

    return BeforeValidator(check)


def integral_float_to_int(value: Any) -> Any:
    """``3.0`` as ``3``: JSON Schema's ``integer`` admits a number with no fraction, and so
    does the API (strings and booleans stay refused: the int fields are strict)."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


def _integer_only(constraints: list[Constraint]) -> bool:
    """Whether the numbers a parameter takes are integers (an int interval, no float one)."""
    intervals = [c for c in constraints if isinstance(c, Interval)]
    return bool(intervals) and all(c.kind == "int" for c in intervals)


def field_for(name: str, exposed: Exposed) -> tuple[Any, FieldInfo]:
    """The pydantic type and field of engine parameter ``name`` as a job sets it."""
    constraints = [
        capped(c, exposed.cap) if isinstance(c, Interval) else c
        for c in PARAMETER_CONSTRAINTS[name]
    ]
    kept = [c for c in constraints if _json_type(c) is not None]
    types = [_json_type(c) for c in kept]
    annotation: Any = types[0] if len(types) == 1 else Union[tuple(types)]  # noqa: UP007
    if len([c for c in kept if not isinstance(c, NoneValue)]) > 1:  # a number or "auto", ...
        annotation = Annotated[annotation, _one_message(kept)]
    if _integer_only(kept):  # the outermost "before" validator runs first
        annotation = Annotated[annotation, BeforeValidator(integral_float_to_int)]
    return annotation, Field(default=exposed.default, description=exposed.description)


def engine_fields() -> dict[str, tuple[Any, FieldInfo]]:
    """The fields of every exposed engine parameter (fresh objects for each model)."""
    return {name: field_for(name, exposed) for name, exposed in EXPOSED.items()}


class EngineFields(BaseModel):
    """The configuration and checks shared by every model that carries engine parameters."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("init", check_fields=False)
    @classmethod
    def _check_init(cls, value: Any, info: ValidationInfo) -> Any:
        """Initial centres must be n_clusters rows of equal, non-zero length."""
        if isinstance(value, list):
            k = info.data.get("n_clusters")  # absent when n_clusters itself is invalid
            if k == "auto":
                raise ValueError("initial centres need an int n_clusters; 'auto' grows them")
            if k is not None and len(value) != k:
                raise ValueError(f"init has {len(value)} rows; it needs n_clusters={k}")
            widths = {len(row) for row in value}
            if len(widths) != 1 or 0 in widths:
                raise ValueError("init rows must be non-empty and of equal length")
        return value


def model_with(name: str, doc: str, base: type[BaseModel], **fields: Any) -> type[BaseModel]:
    """A model of ``base`` with ``fields`` (built at import from the constraint table, so
    a class statement cannot list them)."""
    model = create_model(name, __base__=base, **fields)
    model.__doc__ = doc
    return model


#: A job's engine parameters, defaults filled in (what the queue stores and the worker reads).
EngineParams = model_with(
    "EngineParams",
    "The engine parameters of a job (`RBFKMeans`'s keyword arguments a job may set).",
    EngineFields,
    **engine_fields(),
)


def default_estimator() -> type:
    """The estimator a job is fitted with unless a worker is given another: ``RBFKMeans``
    (imported here, not at module level: the API process does not load torch)."""
    from rbfkm_engine import RBFKMeans

    return RBFKMeans


def engine_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """``RBFKMeans``'s keyword arguments for a job's stored parameters.

    Validated by the same fields the API checked the request with (a job stored by an older
    version, or written by hand, is refused here with a ``ValueError``: bad input, never
    retried), defaults filled in. ``device`` is left out: which device runs the job is the
    worker's choice (:func:`service.devices.job_device`); so are the service's own
    parameters (:data:`SERVICE_PARAMS`).
    """
    engine = {name: value for name, value in params.items() if name not in SERVICE_PARAMS}
    try:
        model = EngineParams.model_validate(engine)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in err['loc'])}: "
            + str(err["msg"]).removeprefix("Value error, ")
            for err in exc.errors()
        )
        raise ValueError(f"invalid job parameters: {problems}") from None
    return model.model_dump(exclude={"device"})


def runtime_limit(params: Mapping[str, Any], default: float | None) -> float | None:
    """A job's time limit per attempt in seconds: its stored ``max_runtime_s``, else
    ``default`` (a job stored before jobs had limits; ``None``: no limit).

    A stored value that is not a positive finite number (a job written by hand) is a
    ``ValueError``: bad input, never retried.
    """
    value = params.get("max_runtime_s")
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"invalid job parameters: max_runtime_s must be a number; got {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"invalid job parameters: max_runtime_s must be > 0; got {value!r}")
    return float(value)
