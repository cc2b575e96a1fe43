"""The job's engine parameters agree with the engine: fields, bounds, options and defaults."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest
from pydantic import ValidationError

from rbfkm_engine import RBFKMeans
from rbfkm_engine.device import DEVICE_PATTERN
from rbfkm_engine.params import PARAMETER_CONSTRAINTS, Interval, Options
from service.params import (
    EXPOSED,
    HIDDEN,
    SERVICE_PARAMS,
    EngineParams,
    capped,
    describe,
    engine_params,
    runtime_limit,
)
from service.schemas import JobCreate
from service.settings import Settings

ENGINE_DEFAULTS = {
    name: parameter.default
    for name, parameter in inspect.signature(RBFKMeans.__init__).parameters.items()
    if name != "self"
}


def test_every_engine_parameter_is_exposed_or_hidden_and_none_is_invented() -> None:
    assert set(EXPOSED) | set(HIDDEN) == set(PARAMETER_CONSTRAINTS) == set(ENGINE_DEFAULTS)
    assert not set(EXPOSED) & set(HIDDEN)
    assert set(EngineParams.model_fields) == set(EXPOSED)
    assert set(JobCreate.model_fields) == {"dataset_id", *EXPOSED, *SERVICE_PARAMS}


def test_defaults_are_the_engines() -> None:
    for name, field in EngineParams.model_fields.items():
        if name == "n_clusters":  # the service makes k a required choice
            assert field.is_required()
            continue
        assert field.default == ENGINE_DEFAULTS[name], name


def test_stored_params_are_the_engines_defaults_filled_in() -> None:
    limits = Settings(max_runtime_s=120.0, max_runtime_cap_s=600.0)
    params = JobCreate(dataset_id="d", n_clusters=3).params(limits)
    defaults = {name: ENGINE_DEFAULTS[name] for name in EXPOSED if name != "n_clusters"}
    assert params == {"n_clusters": 3, **defaults, "max_runtime_s": 120.0}


def _schema(name: str) -> dict:
    return EngineParams.model_json_schema()["properties"][name]


def _alternatives(name: str) -> list[dict]:
    schema = _schema(name)
    return schema.get("anyOf", [schema])


@pytest.mark.parametrize("name", sorted(EXPOSED))
def test_bounds_and_options_come_from_the_constraints(name: str) -> None:
    documented = _alternatives(name)
    for constraint in PARAMETER_CONSTRAINTS[name]:
        if isinstance(constraint, Interval):
            interval = capped(constraint, EXPOSED[name].cap)
            (schema,) = [s for s in documented if s.get("type") in ("integer", "number")]
            assert schema["type"] == ("integer" if interval.kind == "int" else "number")
            low = "minimum" if interval.closed in ("both", "left") else "exclusiveMinimum"
            high = "maximum" if interval.closed in ("both", "right") else "exclusiveMaximum"
            assert schema.get(low) == interval.low
            assert schema.get(high) == interval.high
        elif isinstance(constraint, Options):
            values = {v for s in documented for v in s.get("enum", [s.get("const")])}
            assert set(constraint.values) <= values


def test_service_caps_only_tighten_the_engine() -> None:
    for name, exposed in EXPOSED.items():
        if exposed.cap is None:
            continue
        (interval,) = [c for c in PARAMETER_CONSTRAINTS[name] if isinstance(c, Interval)]
        assert interval.high is None or exposed.cap <= interval.high
        assert _schema(name)["maximum"] == exposed.cap
    with pytest.raises(ValidationError):
        EngineParams(n_clusters=2, max_iter=100_001)
    with pytest.raises(ValidationError):
        EngineParams(n_clusters=2, n_init=1001)


def test_every_value_the_api_accepts_the_engine_accepts() -> None:
    from rbfkm_engine.params import validate_params

    accepted = [
        {"n_clusters": 1},
        {"n_clusters": 4, "assignment": "hard", "sigma0": 2.5, "sigma_min": 1e-6},
        {"n_clusters": 2, "cooling": 0.5, "tol": 0, "init": "random", "n_init": 3},
        {"n_clusters": 2, "init": [[0.0, 1.0], [2.0, 3.0]], "random_state": 2**32 - 1},
        {"n_clusters": 2, "device": "cuda:3", "max_iter": 100_000},
    ]
    for params in accepted:
        kwargs = EngineParams(**params).model_dump()
        validate_params(kwargs)


def test_temperature_errors_are_one_message() -> None:
    assert describe(PARAMETER_CONSTRAINTS["sigma0"][0]) == "a finite number > 0"
    with pytest.raises(ValidationError) as info:
        EngineParams(n_clusters=2, sigma_min="cold")
    (error,) = info.value.errors()
    assert error["loc"] == ("sigma_min",)
    assert 'must be a finite number > 0 or "auto"' in error["msg"]


def test_a_misspelt_init_is_one_message_naming_init() -> None:
    with pytest.raises(ValidationError) as info:
        EngineParams(n_clusters=2, init="kmeans++")
    (error,) = info.value.errors()
    assert error["loc"] == ("init",)
    assert '"k-means++" or "random"' in error["msg"]


@pytest.mark.parametrize("device", ["tpu", "cuda:", "cuda:x", "CPU", "cuda:-1"])
def test_device_spellings_are_the_engines(device: str) -> None:
    with pytest.raises(ValidationError, match="'cuda:N'"):
        EngineParams(n_clusters=2, device=device)


def test_the_document_states_the_device_spellings() -> None:
    """The OpenAPI schema of `device` refuses what the API refuses (a pattern), while the
    API's own message stays the one that names the spellings."""
    schema = JobCreate.model_json_schema()["properties"]["device"]
    assert schema["pattern"] == DEVICE_PATTERN
    with pytest.raises(ValidationError, match="'cuda:N'"):
        JobCreate(dataset_id="d", n_clusters=2, device="\u00ff9")


def test_engine_params_is_what_the_worker_passes() -> None:
    stored = JobCreate(dataset_id="d", n_clusters=3, device="cpu", random_state=7).params()
    kwargs = engine_params(stored)
    assert "device" not in kwargs  # the worker picks it (service.devices.job_device)
    assert kwargs["random_state"] == 7 and kwargs["n_clusters"] == 3
    assert engine_params({"n_clusters": 2}) == {
        **{n: ENGINE_DEFAULTS[n] for n in EXPOSED if n != "device"},
        "n_clusters": 2,
    }
    RBFKMeans(**kwargs, device="cpu")  # the estimator takes them as they are


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"n_clusters": 0}, "n_clusters:"),
        ({"n_clusters": 2, "sigma0": None}, 'sigma0: must be a finite number > 0 or "auto"'),
        ({"n_clusters": 2, "dtype": "float64"}, "dtype:"),
        ({}, "n_clusters: Field required"),
    ],
)
def test_engine_params_refuses_bad_stored_params_as_bad_input(params: dict, needle: str) -> None:
    with pytest.raises(ValueError, match="invalid job parameters") as info:
        engine_params(params)
    assert needle in str(info.value)


def test_the_api_process_does_not_import_torch() -> None:
    code = (
        "import sys, service.app, service.schemas, service.params, service.devices; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


def test_the_time_limit_is_the_services_not_the_engines() -> None:
    stored = JobCreate(dataset_id="d", n_clusters=2, max_runtime_s=30).params()
    assert stored["max_runtime_s"] == 30.0
    assert "max_runtime_s" not in engine_params(stored)
    RBFKMeans(**engine_params(stored))  # the estimator takes what is left
    assert SERVICE_PARAMS.isdisjoint(PARAMETER_CONSTRAINTS)
    assert runtime_limit(stored, None) == 30.0
    assert runtime_limit({"n_clusters": 2}, 99.0) == 99.0  # stored before jobs had limits
    assert runtime_limit({"n_clusters": 2}, None) is None
    for bad in (0, -5, float("nan"), "1", True):
        with pytest.raises(ValueError, match="max_runtime_s"):
            runtime_limit({"max_runtime_s": bad}, None)
