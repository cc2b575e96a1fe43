"""The request models accept what the engine accepts and reject the rest with field errors."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from service.problems import ProblemError
from service.schemas import DatasetInline, Job, JobCreate, Problem, SparseRows
from service.settings import Settings

#: A server whose jobs get 120 s unless they ask for up to 600 s.
LIMITS = Settings(max_runtime_s=120.0, max_runtime_cap_s=600.0)

BASE = {"dataset_id": "d1", "n_clusters": 3}


def test_n_clusters_may_be_auto() -> None:
    params = JobCreate(dataset_id="d1", n_clusters="auto", max_clusters=6).params(LIMITS)
    assert (params["n_clusters"], params["max_clusters"]) == ("auto", 6)
    with pytest.raises(ValidationError, match="auto"):
        JobCreate(dataset_id="d1", n_clusters="many")
    with pytest.raises(ValidationError, match="int n_clusters"):
        JobCreate(dataset_id="d1", n_clusters="auto", init=[[0.0, 1.0]])


def test_defaults_mirror_the_engine() -> None:
    params = JobCreate(**BASE).params(LIMITS)
    assert params == {
        "n_clusters": 3,
        "max_clusters": 10,
        "assignment": "entmax15",
        "metric": "euclidean",
        "sigma0": "auto",
        "sigma_min": "auto",
        "cooling": 0.8,
        "overshoot": 1.0,
        "max_iter": 300,
        "tol": 1e-4,
        "init": "k-means++",
        "n_init": 1,
        "random_state": None,
        "device": "auto",
        "max_runtime_s": 120.0,  # the server's default: a service parameter, not the engine's
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("n_clusters", 0),
        ("assignment", "sparsemax"),
        ("sigma0", 0),
        ("sigma0", -1.0),
        ("sigma0", "hot"),
        ("sigma_min", 0.0),
        ("cooling", 0.0),
        ("cooling", 1.0),
        ("overshoot", 0.9),
        ("overshoot", 5),
        ("max_iter", 0),
        ("tol", -1e-3),
        ("init", "kmeans"),
        ("n_init", 0),
        ("random_state", -1),
        ("random_state", 1.5),
        ("random_state", True),
        ("n_clusters", True),
        ("n_clusters", 3.5),
        ("max_iter", "300"),
        ("sigma0", True),
        ("device", "tpu"),
        ("device", "cuda:x"),
        ("unknown", 1),
    ],
)
def test_bad_parameters_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as info:
        JobCreate(**{**BASE, field: value})
    assert field in {str(part) for err in info.value.errors() for part in err["loc"]}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("sigma0", 2.5),
        ("sigma_min", 1e-6),
        ("assignment", "hard"),
        ("assignment", "softmax"),
        ("init", "random"),
        ("device", "cpu"),
        ("device", "cuda"),
        ("device", "cuda:1"),
        ("random_state", 0),
    ],
)
def test_good_parameters_pass(field: str, value: object) -> None:
    assert JobCreate(**{**BASE, field: value}).params()[field] == value


@pytest.mark.parametrize("field", ["n_clusters", "max_iter", "n_init", "random_state"])
def test_integers_written_with_a_zero_fraction_are_integers(field: str) -> None:
    # JSON Schema's "integer" (what the OpenAPI document says) admits 3.0; so does the API.
    value = JobCreate(**{**BASE, field: 3.0}).params()[field]
    assert value == 3 and type(value) is int


def test_dataset_bodies_document_what_the_parser_accepts() -> None:
    schema = DatasetInline.model_json_schema()
    data = schema["properties"]["data"]
    assert data["minItems"] == 1 and data["items"]["minItems"] == 1
    value = data["items"]["items"]
    assert value["maximum"] == -value["minimum"] == float(np.finfo(np.float32).max)
    assert schema["properties"]["name"]["anyOf"][0]["maxLength"] == 200
    too_long = {"data": [[1]], "name": "n" * 201}
    for bad in ({"data": []}, {"data": [[]]}, {"data": [[1e39]]}, too_long):
        with pytest.raises(ValidationError):
            DatasetInline.model_validate(bad)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_numbers_are_rejected(bad: float) -> None:
    for field, value in (("tol", bad), ("sigma0", bad), ("init", [[bad, 0.0]])):
        with pytest.raises(ValidationError):
            JobCreate(**{**BASE, "n_clusters": 1, field: value})


@pytest.mark.parametrize("value", [-1, 0, "hot", None])
def test_temperature_errors_are_one_message(value: object) -> None:
    with pytest.raises(ValidationError) as info:
        JobCreate(**{**BASE, "sigma0": value})
    errors = info.value.errors()
    assert [err["loc"] for err in errors] == [("sigma0",)]
    assert 'finite number > 0 or "auto"' in errors[0]["msg"]


def test_init_errors_name_the_init_field() -> None:
    with pytest.raises(ValidationError) as info:
        JobCreate(**BASE, init=[[0, 0], [1, 1]])
    assert [err["loc"] for err in info.value.errors()] == [("init",)]


def test_init_array_must_be_k_rows_of_equal_width() -> None:
    ok = JobCreate(**BASE, init=[[0, 0], [1, 1], [2, 2]])
    assert ok.params()["init"] == [[0, 0], [1, 1], [2, 2]]
    with pytest.raises(ValidationError, match="n_clusters=3"):
        JobCreate(**BASE, init=[[0, 0], [1, 1]])
    with pytest.raises(ValidationError, match="equal length"):
        JobCreate(**BASE, init=[[0, 0], [1], [2, 2]])


def test_job_accepts_the_queue_shape_and_missing_progress() -> None:
    job = Job.model_validate(
        {
            "id": "j",
            "dataset_id": "d",
            "params": {"n_clusters": 2},
            "status": "queued",
            "progress": {"fraction": None, "sigma": None, "iteration": None, "objective": None},
            "error": None,
            "created_at": "2026-01-01T00:00:00.000+00:00",
            "started_at": None,
            "finished_at": None,
            "attempts": 0,
        }
    )
    assert job.status == "queued"
    with pytest.raises(ValidationError):
        Job.model_validate({**job.model_dump(), "status": "paused"})


def test_a_shape_is_two_integers_said_with_items() -> None:
    # `prefixItems`, pydantic's spelling of a tuple, stopped schemathesis reading the
    # assignments' schema ("Invalid Schema Object"): the same constraint with `items`.
    shape = SparseRows.model_json_schema(mode="serialization")["properties"]["shape"]
    assert "prefixItems" not in shape
    assert (shape["items"], shape["minItems"], shape["maxItems"]) == ({"type": "integer"}, 2, 2)
    assert SparseRows.model_validate(
        {"shape": [3, 2], "offset": 0, "limit": 1, "indptr": [0], "indices": [], "values": []}
    ).shape == (3, 2)


def test_models_carry_openapi_examples() -> None:
    for model in (Problem, JobCreate, Job):
        assert model.model_json_schema().get("examples"), model.__name__


def test_a_job_asks_for_its_time_limit_up_to_the_cap() -> None:
    assert JobCreate(**BASE, max_runtime_s=30).params(LIMITS)["max_runtime_s"] == 30.0
    assert JobCreate(**BASE, max_runtime_s=600).params(LIMITS)["max_runtime_s"] == 600.0
    with pytest.raises(ProblemError) as caught:
        JobCreate(**BASE, max_runtime_s=601).params(LIMITS)
    assert caught.value.status == 422
    assert (
        "cap of 600 s" in caught.value.detail and "RBFKM_MAX_RUNTIME_CAP_S" in caught.value.detail
    )
    assert caught.value.errors == [
        {"field": "body.max_runtime_s", "message": "must be <= 600 (the server's cap)"}
    ]
    # A default above the cap is the cap.
    low_cap = Settings(max_runtime_s=3600.0, max_runtime_cap_s=60.0)
    assert JobCreate(**BASE).params(low_cap)["max_runtime_s"] == 60.0


@pytest.mark.parametrize("bad", (0, -1.0, float("inf"), "soon"))
def test_a_time_limit_must_be_a_positive_number(bad: object) -> None:
    with pytest.raises(ValidationError) as caught:
        JobCreate(**BASE, max_runtime_s=bad)
    assert caught.value.errors()[0]["loc"] == ("max_runtime_s",)
