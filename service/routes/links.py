"""OpenAPI links: which operation a response's ids lead to, stated in the document.

A client that uploads a dataset gets its `id` back and then reads it, deletes it or starts a
job on it (`POST /v1/jobs` with `dataset_id`); a job's `id` leads to polling it, cancelling
and deleting it, reading its result and assignments and predicting with it. The document
says so with `links` on the responses that carry the ids, so that readers of the document
(and the stateful phase of a schemathesis run, `tests/service/test_openapi_contract.py`)
need not guess it from the names.

Each link names its target by `operationRef` (a JSON pointer to the path and method, which
stay stable when a route's function is renamed, unlike FastAPI's generated operationIds)
and fills the target's parameters, or its JSON body, from the response with runtime
expressions (`$response.body#/id`).
"""

from __future__ import annotations

from typing import Any

#: The id in a dataset's or a job's body; the dataset a job names.
ID = "$response.body#/id"
DATASET_OF_JOB = "$response.body#/dataset_id"


def link(
    method: str,
    path: str,
    description: str,
    *,
    parameters: dict[str, str] | None = None,
    body: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An OpenAPI Link Object to the operation `method path` (as the document spells the
    path), with its parameters or request body taken from the response."""
    pointer = path.replace("~", "~0").replace("/", "~1")
    target: dict[str, Any] = {
        "operationRef": f"#/paths/{pointer}/{method.lower()}",
        "description": description,
    }
    if parameters:
        target["parameters"] = parameters
    if body:
        target["requestBody"] = body
    return target


_DATASET = "/v1/datasets/{dataset_id}"
_JOB = "/v1/jobs/{job_id}"

#: Where a dataset (`Dataset`, with its `id`) leads.
DATASET_LINKS: dict[str, Any] = {
    "GetDataset": link("GET", _DATASET, "Read the dataset.", parameters={"dataset_id": ID}),
    "DeleteDataset": link("DELETE", _DATASET, "Delete the dataset.", parameters={"dataset_id": ID}),
    "CreateJob": link(
        "POST", "/v1/jobs", "Start a clustering job on the dataset.", body={"dataset_id": ID}
    ),
}

#: Where a job (`Job`, with its `id` and `dataset_id`) leads.
JOB_LINKS: dict[str, Any] = {
    "GetJob": link("GET", _JOB, "Poll the job.", parameters={"job_id": ID}),
    "CancelJob": link("POST", f"{_JOB}/cancel", "Cancel the job.", parameters={"job_id": ID}),
    "DeleteJob": link("DELETE", _JOB, "Delete the job and its result.", parameters={"job_id": ID}),
    "GetResult": link(
        "GET", f"{_JOB}/result", "The result, once succeeded.", parameters={"job_id": ID}
    ),
    "GetAssignments": link(
        "GET", f"{_JOB}/assignments", "The soft assignments.", parameters={"job_id": ID}
    ),
    "GetProjection": link(
        "GET", f"{_JOB}/projection", "A 2-D picture of the clusters.", parameters={"job_id": ID}
    ),
    "Predict": link(
        "POST", f"{_JOB}/predict", "Assign new points with the model.", parameters={"job_id": ID}
    ),
    "GetJobDataset": link(
        "GET", _DATASET, "The job's dataset.", parameters={"dataset_id": DATASET_OF_JOB}
    ),
}
