"""The OpenAPI pieces shared by the routes: dataset bodies, paging parameters, problems."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from service.routes.bodies import DATASET_BODY, problems
from service.schemas import DatasetInline, Problem
from tests.service.conftest import PROBLEM, assert_problem

MEDIA = {"application/json", "text/csv", "application/x-npy", "application/vnd.apache.parquet"}
LISTS = ("/v1/datasets", "/v1/jobs", "/v1/jobs/dead-letters")


def test_problems_document_each_status_with_the_problem_model() -> None:
    responses = problems(404, 409)
    assert set(responses) == {404, 409}
    for entry in responses.values():
        assert entry == {"model": Problem, "description": "Problem details"}
    assert problems() == {}


def test_the_dataset_body_is_documented_on_every_route_that_takes_one(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/v1/datasets", "/v1/jobs/{job_id}/predict"):
        content = paths[path]["post"]["requestBody"]["content"]
        assert set(content) == MEDIA, path
        assert paths[path]["post"]["requestBody"]["required"] is True


def test_the_documented_examples_are_accepted(client: TestClient) -> None:
    content = DATASET_BODY["requestBody"]["content"]
    inline = content["application/json"]["example"]
    assert DatasetInline.model_validate(inline).name == "toy"
    created = client.post("/v1/datasets", json=inline)
    assert created.status_code == 201, created.text
    assert (created.json()["n_samples"], created.json()["n_features"]) == (2, 2)
    csv = client.post(
        "/v1/datasets",
        content=content["text/csv"]["example"],
        headers={"Content-Type": "text/csv"},
    )
    assert csv.status_code == 201, csv.text
    assert (csv.json()["n_samples"], csv.json()["n_features"]) == (2, 2)


@pytest.mark.parametrize("path", LISTS)
def test_paging_bounds_hold_on_every_list(client: TestClient, path: str) -> None:
    assert client.get(path, params={"offset": 0, "limit": 1000}).status_code == 200
    limit = assert_problem(client.get(path, params={"limit": 1001}), 422)
    assert limit["errors"][0]["field"] == "query.limit"
    offset = assert_problem(client.get(path, params={"offset": -1}), 422)
    assert offset["errors"][0]["field"] == "query.offset"


@pytest.mark.parametrize("path", LISTS)
def test_paging_parameters_are_documented(client: TestClient, path: str) -> None:
    operation = client.get("/openapi.json").json()["paths"][path]["get"]
    params = {p["name"]: p for p in operation["parameters"]}
    assert params["offset"]["schema"]["minimum"] == 0
    assert (params["limit"]["schema"]["minimum"], params["limit"]["schema"]["maximum"]) == (1, 1000)
    assert params["offset"]["description"] and params["limit"]["description"]
    assert list(operation["responses"]["422"]["content"]) == [PROBLEM]
