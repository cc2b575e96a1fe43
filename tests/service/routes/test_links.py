"""The document's links: every one names an operation of the document and its parameters."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from service.routes.links import DATASET_LINKS, JOB_LINKS, link


def _resolve(document: dict[str, Any], ref: str) -> dict[str, Any]:
    node: Any = document
    for part in ref.removeprefix("#/").split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def test_operation_refs_are_json_pointers() -> None:
    target = link("GET", "/v1/jobs/{job_id}/result", "The result.", parameters={"job_id": "x"})
    assert target["operationRef"] == "#/paths/~1v1~1jobs~1{job_id}~1result/get"


def test_every_link_leads_to_an_operation_and_fills_its_parameters(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    seen = set()
    for operations in document["paths"].values():
        for operation in operations.values():
            for response in operation["responses"].values():
                for name, target in response.get("links", {}).items():
                    seen.add(name)
                    op = _resolve(document, target["operationRef"])
                    params = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
                    assert set(target.get("parameters", {})) == params, name
                    if "requestBody" in target:
                        schema = op["requestBody"]["content"]["application/json"]["schema"]
                        body = _resolve(document, schema["$ref"])
                        assert set(target["requestBody"]) <= set(body["properties"]), name
    assert seen == set(DATASET_LINKS) | set(JOB_LINKS)


def test_the_ids_a_client_gets_back_carry_links(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    created = paths["/v1/datasets"]["post"]["responses"]
    assert set(created["201"]["links"]) == set(created["200"]["links"]) == set(DATASET_LINKS)
    assert set(paths["/v1/jobs"]["post"]["responses"]["202"]["links"]) == set(JOB_LINKS)
    assert "GetResult" in paths["/v1/jobs/{job_id}"]["get"]["responses"]["200"]["links"]
