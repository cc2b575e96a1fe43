"""The OpenAPI document against the live service: a property-based test by schemathesis.

Schemathesis reads `/openapi.json` from a real uvicorn server (real Redis, one spawned
worker, so jobs run and results exist), generates requests from it, valid and invalid,
sends them over HTTP and checks every response against the document:

- no 5xx (`not_a_server_error`);
- every status code documented for its operation (`status_code_conformance`), with the
  documented content type (`content_type_conformance`: every 4xx/5xx is problem+json) and
  body (`response_schema_conformance`), every error a well-formed problem
  (:func:`errors_are_problems`);
- the document's constraints (lengths, enums, bounds) the API's own: what the schema
  refuses, the API refuses (`negative_data_rejection`); what it admits, the API accepts
  (:func:`valid_requests_accepted`), but for the rules no JSON Schema can state
  (:data:`INEXPRESSIBLE`: rows of equal length, a dataset that exists, `n_clusters` at most
  its rows, ...);
- a wrong method answers `405` with an `Allow` that names every method of the path
  (`unsupported_method`, `allow_header_conformance`).

The run is schemathesis's own engine, the one `st run` drives, with its four phases: the
document's examples, the coverage phase (boundaries and each constraint broken in turn), the
fuzzing phase (`MAX_EXAMPLES` cases an operation) and the stateful phase, which follows
the document's `links` (upload a dataset, start a job on it, poll it, read its result and
assignments, predict, cancel, delete) for `STATEFUL_STEPS` steps a scenario. Generation is
derandomized with a fixed seed, so CI sees the same cases on every run. (Not the pytest
plugin's `from_fixture(...).parametrize()`: with pytest 9 it fails on `Function._nodeid`.)

All of it twice: without API keys, and with two tenants and an admin key, every request
carrying a tenant's key; there, a request without a key or with an unknown one is a
documented 401 on every `/v1` operation (:func:`test_every_v1_operation_needs_a_key`).

Dataset bodies other than JSON are bytes to the document (`format: binary`): whether bytes
parse as CSV, `.npy` or Parquet is the format's rule, not the schema's, so a 422
`invalid-dataset` for such a body is no discrepancy. Schemathesis draws real `.npy` and
Parquet files from generators given here (and the document's CSV example), so the
success paths of those formats are reached too.

Schemathesis's own faults met on the way, worked around here or in the document: it reads
a tuple's `prefixItems` as an invalid schema (`SparseRows.shape` is now said with `items`);
it sends the bytes it generates for a `text/*` body as an empty body (`_csv_body`); and it
takes a "negative" `include=` (the list `[""]`) for invalid, though on the wire it is the
empty list, which the document admits (:func:`_empty_list_on_the_wire`).
"""

from __future__ import annotations

import io
import os
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import strategies as st  # noqa: E402
from schemathesis.engine import Status, events  # noqa: E402

from tests.service.conftest import (  # noqa: E402
    PROBLEM,
    blobs,
    live_server,
    make_settings,
    npy_bytes,
    private_db,
    wait_for,
)

pytestmark = pytest.mark.slow

#: Cases per operation in the fuzzing phase; steps of a stateful scenario; the seed (none
#: with `HYPOTHESIS_PROFILE=explore`, which searches afresh and longer, as in tests/conftest.py).
EXPLORE = os.environ.get("HYPOTHESIS_PROFILE") == "explore"
MAX_EXAMPLES = 300 if EXPLORE else 30
STATEFUL_STEPS = 8
SEED = None if EXPLORE else 24

TENANT_KEYS = {"acme": "key-acme", "umbrella": "key-umbrella"}
ADMIN_KEY = "key-ops"
DEPLOYMENTS: dict[str, dict[str, Any]] = {
    "open": {},
    "tenants": {"api_keys": {t: [k] for t, k in TENANT_KEYS.items()}, "admin_keys": [ADMIN_KEY]},
}

# --- dataset bodies: real files for the media types the document gives as bytes ----------

_VALUES = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False, width=32)


@st.composite
def _grids(draw: st.DrawFn) -> np.ndarray:
    rows = draw(st.integers(1, 6))
    cols = draw(st.integers(1, 3))
    cells = draw(st.lists(_VALUES, min_size=rows * cols, max_size=rows * cols))
    return np.asarray(cells, dtype=np.float64).reshape(rows, cols)


def _parquet(grid: np.ndarray) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({f"x{j}": grid[:, j] for j in range(grid.shape[1])}), sink)
    return sink.getvalue()


schemathesis.openapi.media_type("application/x-npy", _grids().map(npy_bytes))
schemathesis.openapi.media_type("application/vnd.apache.parquet", _grids().map(_parquet))

# --- checks of our own, beside schemathesis's ---------------------------------------------

#: What a valid request may still be refused for: the rules a JSON Schema cannot state
#: (they relate a field to another, or to what is stored), as patterns of the problem's
#: `errors` (field, message). Any other refusal of a schema-valid request is a discrepancy.
INEXPRESSIBLE: tuple[tuple[str, str], ...] = (
    # Stored state: the dataset must exist (and be the caller's), have at least n_clusters
    # rows, and the job must fit a worker's memory;
    (r"body\.dataset_id", r"unknown dataset"),
    (r"body\.n_clusters", r"must be <= \d+ \(the dataset's n_samples\)"),
    (r"body\.n_clusters", r"the job exceeds the worker's memory budget"),
    # initial centres: n_clusters rows, all as wide as the dataset;
    (r"body\.init", r"init has \d+ rows; it needs n_clusters=\d+"),
    (r"body\.init", r"init rows must be non-empty and of equal length"),
    (r"body\.init", r"rows must have \d+ values"),
    # rows of one length (a schema cannot say "equal");
    (r"body(\.data\[\d+\])?", r"row \d+ has \d+ values but row \d+ has \d+"),
    # points to predict as wide as the model's dataset;
    (r"body", r"needs \d+ columns"),
    # an idempotency key already used with another body;
    (r"header\.idempotency-key|body", r"already used"),
    # a weight column the body names (and whose values are weights);
    (r"query\.weight_column", r"0-based index|names no column|only column"),
    (r"body\.[^\[]+(\[\d+\])?", r"weights? (must be|is)|every weight is 0"),
    # initial centres for a fixed number of clusters only.
    (r"body\.init", r"initial centres need an int n_clusters"),
    # URLs the server opens: hosts that resolve to public addresses only (or allowed by the
    # operator), and a webhook secret configured for the tenant.
    (
        r"body\.callback_url",
        r"address$|does not resolve|not a valid URL|no host|credentials in URL|no webhook secret",
    ),
    # a dataset's source: a host the server reaches, a store configured for the tenant, and
    # a file there it can read; a job's output: a store configured for the tenant.
    (
        r"body\.source",
        r"address$|does not resolve|not a valid URL|no host|credentials in URL|storage options"
        r"|not a plain object URL|no bucket|not installed|not found|access denied|unreachable"
        r"|timed out|unknown format|answered \d+|not a file|store unavailable|too many redirects",
    ),
    (r"body\.output", r"storage options|not a plain object URL|no bucket|not installed"),
)


#: The problem type of a body that does not parse as its Content-Type says.
INVALID_FILE = "urn:rbfkm:problem:invalid-dataset"


def _inexpressible(error: dict[str, str]) -> bool:
    return any(
        re.fullmatch(where, error.get("field", "")) and re.search(what, error.get("message", ""))
        for where, what in INEXPRESSIBLE
    )


@schemathesis.serializer("text/csv")
def _csv_body(ctx: Any, value: Any) -> bytes:
    """A CSV body as its bytes. Schemathesis's text serializer sends the bytes it generates
    for `format: binary` (a `Binary`, a subclass of `str` that is empty) as an empty body."""
    data = getattr(value, "data", value)
    return data if isinstance(data, bytes) else str(data).encode()


@schemathesis.check
def valid_requests_accepted(ctx: Any, response: Any, case: Any) -> bool | None:
    """A request the document admits is not refused as invalid (a 4xx other than a missing
    resource, a conflict or a quota), unless for a rule in :data:`INEXPRESSIBLE`."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return None
    if not 400 <= response.status_code < 500 or response.status_code in (404, 409, 429):
        return None
    problem = response.json()
    if problem["type"] == INVALID_FILE and case.media_type != "application/json":
        return None  # a file's content is the format's rule (the document: "bytes")
    errors = problem.get("errors") or [{"field": "", "message": problem.get("detail", "")}]
    if not all(_inexpressible(error) for error in errors):
        raise AssertionError(
            f"a request the document admits was refused with {response.status_code}: "
            f"{problem.get('detail')}"
        )
    return None


@schemathesis.check
def errors_are_problems(ctx: Any, response: Any, case: Any) -> bool | None:
    """Every 4xx/5xx is an RFC 9457 problem whose `status` is the response's."""
    if response.status_code < 400:
        return None
    content_type = response.headers.get("content-type", [""])[0]
    if not content_type.startswith(PROBLEM):
        raise AssertionError(f"{response.status_code} answered {content_type!r}, not {PROBLEM}")
    body = response.json()
    missing = {"type", "title", "status", "detail", "errors"} - set(body)
    if missing or body["status"] != response.status_code:
        raise AssertionError(f"not a problem of status {response.status_code}: {body}")
    return None


#: The checks run on every response (every other check of schemathesis is off).
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
    "unsupported_method",
    "allow_header_conformance",
    "valid_requests_accepted",
    "errors_are_problems",
    "ignored_auth",
)

# --- the live service ------------------------------------------------------------------------


@dataclass
class Deployment:
    """A live service and how to call it."""

    name: str
    base_url: str
    headers: dict[str, str]
    dataset_id: str
    job_id: str
    keyed: bool = False


@dataclass
class Report:
    """What a schemathesis run did and found."""

    requests: Counter[str] = field(default_factory=Counter)
    #: Operations that answered a 2xx at least once, and how many 401s were answered.
    succeeded: set[str] = field(default_factory=set)
    unauthorized: int = 0
    failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    links: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        return (
            f"{sum(self.requests.values())} requests in {self.seconds:.1f} s "
            f"{dict(self.requests)}, {self.links} links; a 2xx from {len(self.succeeded)} "
            f"operations, {self.unauthorized} 401s"
        )


def _seed(base_url: str, headers: dict[str, str]) -> tuple[str, str]:
    """A dataset and a succeeded job on it, for the operations that read one."""
    with httpx.Client(base_url=base_url, headers=headers, timeout=60) as http:
        wait_for(lambda: http.get("/readyz").status_code == 200, 120, "a worker to be ready")
        dataset = http.post(
            "/v1/datasets",
            content=npy_bytes(blobs(30, 2, 3)),
            headers={"Content-Type": "application/x-npy"},
        ).json()
        job = http.post(
            "/v1/jobs", json={"dataset_id": dataset["id"], "n_clusters": 3, "random_state": 0}
        ).json()
        wait_for(
            lambda: http.get(f"/v1/jobs/{job['id']}").json()["status"] == "succeeded",
            120,
            "the seed job",
        )
    return dataset["id"], job["id"]


@pytest.fixture(scope="module", params=sorted(DEPLOYMENTS))
def deployment(
    request: pytest.FixtureRequest, redis_server: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    name = request.param
    with private_db(redis_server, 11 if name == "open" else 12) as url:
        settings = make_settings(
            url,
            tmp_path_factory.mktemp(f"contract-{name}"),
            key_prefix=f"contract-{name}",
            max_upload_bytes=1 << 20,
            **DEPLOYMENTS[name],
        )
        with live_server(settings, tmp_path_factory.mktemp("tmp")) as base_url:
            headers = {"X-API-Key": TENANT_KEYS["acme"]} if DEPLOYMENTS[name] else {}
            dataset_id, job_id = _seed(base_url, headers)
            yield Deployment(name, base_url, headers, dataset_id, job_id, bool(headers))


def _config(live: Deployment) -> Any:
    """Bounded, derandomized, the deployment's key on every request; the seeded records for
    the operations that read them (random ids are 404s), not for those that delete them."""

    def reads(pattern: str, **parameters: str) -> dict[str, Any]:
        return {"include-path-regex": pattern, "exclude-method": "DELETE", "parameters": parameters}

    return schemathesis.Config.from_dict(
        {
            **({} if SEED is None else {"seed": SEED}),
            "base-url": live.base_url,
            **(
                {"auth": {"openapi": {"APIKeyHeader": {"api_key": live.headers["X-API-Key"]}}}}
                if live.keyed
                else {}
            ),
            "workers": 1,
            "generation": {
                "mode": "all",
                "max-examples": MAX_EXAMPLES,
                "deterministic": not EXPLORE,
                "with-security-parameters": False,
                "database": "none",
            },
            "checks": {"enabled": False, **{name: {"enabled": True} for name in CHECKS}},
            "phases": {"stateful": {"max-steps": STATEFUL_STEPS}},
            "operations": [
                reads(r"^/v1/jobs/\{job_id\}", **{"path.job_id": live.job_id}),
                reads(r"^/v1/datasets/\{dataset_id\}$", **{"path.dataset_id": live.dataset_id}),
            ],
            "suppress-health-check": ["all"],
        }
    )


def _empty_list_on_the_wire(case: Any, check: Any) -> bool:
    """A "negative" `include=` or `exclude=`: the list `[""]` (an empty name, outside the
    enum) goes on the wire as `include=`, exactly as the empty list does (form style), which
    the document admits and the API reads (keep no part, leave none out)."""
    if check.name != "negative_data_rejection":
        return False
    found = re.search(
        r"Invalid component: parameters? (.*) in query", check.failure_info.failure.message
    )
    names = set(re.findall(r"`(\w+)`", found.group(1))) if found else set()
    query = case.query or {}
    listed = bool(names) and names <= {"include", "exclude"}
    return listed and all(query.get(name) in ("", [""]) for name in names)


def _describe(recorder: Any, case_id: str, check: Any) -> str:
    case = recorder.cases[case_id].value
    failure = check.failure_info.failure
    interaction = recorder.interactions.get(case_id)
    status = interaction.response.status_code if interaction and interaction.response else "-"
    return (
        f"{case.operation.label} [{check.name}] {failure.title}: {failure.message} "
        f"(status {status})\n    {check.failure_info.code_sample}"
    )


def run_schemathesis(live: Deployment) -> Report:
    """Every phase against `live`; what was sent and what failed."""
    schema = schemathesis.openapi.from_url(f"{live.base_url}/openapi.json", config=_config(live))
    report = Report()
    for event in schemathesis.engine.from_schema(schema).execute():
        if isinstance(event, events.PhaseStarted) and event.payload is not None:
            report.links = event.payload.transitions_total - event.payload.inferred_transitions
        elif isinstance(event, (events.ScenarioFinished, events.FuzzScenarioFinished)):
            recorder = event.recorder
            phase = getattr(event, "phase", None)
            report.requests[phase.value if phase else "fuzzing"] += len(recorder.interactions)
            for case_id, interaction in recorder.interactions.items():
                status = interaction.response.status_code if interaction.response else 0
                if 200 <= status < 300:
                    report.succeeded.add(recorder.cases[case_id].value.operation.label)
                report.unauthorized += status == 401
            for case_id, checks in recorder.checks.items():
                for check in checks:
                    if check.status != Status.FAILURE or check.failure_info is None:
                        continue
                    if not _empty_list_on_the_wire(recorder.cases[case_id].value, check):
                        report.failures.append(_describe(recorder, case_id, check))
        elif isinstance(event, events.NonFatalError):
            report.errors.append(f"{event.label}: {event.info.format()}")
        elif isinstance(event, events.FatalError):
            report.errors.append(f"fatal: {event.exception!r}")
        elif isinstance(event, events.EngineFinished):
            report.seconds = event.running_time
    return report


def test_the_api_conforms_to_its_document(deployment: Deployment) -> None:
    report = run_schemathesis(deployment)
    print(f"\n{deployment.name}: {report.summary()}")
    assert not report.errors, "\n".join(report.errors)
    assert not report.failures, "\n".join(sorted(set(report.failures)))
    assert report.requests["stateful"] > 0, "the stateful phase sent nothing"
    # The run reached the API's logic, not only its refusals: every operation answered a
    # 2xx at least once (the key was sent, the seeded records and the links were used).
    document = httpx.get(f"{deployment.base_url}/openapi.json").json()
    operations = {f"{m.upper()} {p}" for p, ops in document["paths"].items() for m in ops}
    assert report.succeeded == operations, operations - report.succeeded
    assert report.links > 0, "the document has no links for the stateful phase"


def test_every_v1_operation_needs_a_key(deployment: Deployment) -> None:
    """With keys configured, every `/v1` operation answers a documented 401 problem to a
    request without a key, or with an unknown one."""
    if not deployment.keyed:
        pytest.skip("no keys configured: every request is the default tenant's")
    document = httpx.get(f"{deployment.base_url}/openapi.json").json()
    ids = {"{job_id}": deployment.job_id, "{dataset_id}": deployment.dataset_id}
    checked = 0
    for template, operations in document["paths"].items():
        if not template.startswith("/v1/"):
            continue
        path = template
        for name, value in ids.items():
            path = path.replace(name, value)
        for method, operation in operations.items():
            assert "401" in operation["responses"], f"{method} {template}"
            for headers in ({}, {"X-API-Key": "wrong"}, {"Authorization": "Bearer wrong"}):
                response = httpx.request(method, deployment.base_url + path, headers=headers)
                assert response.status_code == 401, (method, template, headers, response.text)
                assert response.headers["content-type"].startswith(PROBLEM)
                assert response.headers["www-authenticate"] == "Bearer"
                assert response.json()["status"] == 401
                checked += 1
    assert checked >= 3 * 12
    for key in (TENANT_KEYS["umbrella"], ADMIN_KEY):  # the other tenant's, and the admin's
        response = httpx.get(f"{deployment.base_url}/v1/datasets", headers={"X-API-Key": key})
        assert response.status_code == 200, response.text
