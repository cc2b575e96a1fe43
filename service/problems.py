"""RFC 9457 problem details: the one place that maps errors to HTTP.

Routes raise `ProblemError`; the stores raise domain errors (:mod:`service.errors`), which
`_DOMAIN` gives a status and a problem type here; Redis being unreachable is a `503`;
FastAPI's own errors (validation, unknown routes, wrong method) and anything unexpected are
rendered in the same shape, so clients parse one format.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from http import HTTPStatus
from typing import Any, NamedTuple

import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from rbfkm_client.media import PROBLEM_JSON
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.routing import Match, Mount

from service.errors import (
    BodyTooLarge,
    DatasetNotFound,
    IdempotencyKeyContended,
    IdempotencyKeyInProgress,
    IdempotencyKeyReused,
    InvalidDataset,
    InvalidIdempotencyKey,
    JobTooLarge,
    NotAcceptable,
    NotConfigured,
    ProjectionNotFound,
    QuotaExceeded,
    ResultNotFound,
    ServiceError,
    SourceUnavailable,
    UnsafeUrl,
    UnsupportedMediaType,
    UploadInterrupted,
)
from service.logs import OutageLog

logger = logging.getLogger(__name__)

_TYPE_PREFIX = "urn:rbfkm:problem:"

#: Seconds a client should wait before asking again, on every `Retry-After` the API sends:
#: polls of an unfinished job, a `409` for a result not there yet or an idempotency key
#: still being accepted, a `503` while Redis is down. One second: a poll costs the server a
#: single Redis read, so prompt clients are cheap, and most jobs and outages are short
#: enough that a longer wait would only add latency.
RETRY_AFTER_S = 1
RETRY_AFTER = {"Retry-After": str(RETRY_AFTER_S)}


#: The status of a request whose client went away before sending all of it (nginx's 499).
CLIENT_CLOSED_REQUEST = 499
_TITLES = {CLIENT_CLOSED_REQUEST: "Client Closed Request"}
#: The methods a path may answer; OPTIONS says which (every path answers OPTIONS itself).
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


class _Problem(NamedTuple):
    """How a domain error is rendered: status, problem type, `Retry-After` or not, and a
    hint appended to its detail."""

    status: int
    kind: str | None
    retry: bool = False
    hint: str = ""


#: Every domain error's HTTP form (looked up along the exception's class hierarchy).
_DOMAIN: dict[type[ServiceError], _Problem] = {
    InvalidDataset: _Problem(422, "invalid-dataset"),
    UnsupportedMediaType: _Problem(415, "unsupported-media-type"),
    NotAcceptable: _Problem(406, "not-acceptable"),
    BodyTooLarge: _Problem(413, "payload-too-large"),
    DatasetNotFound: _Problem(404, "dataset-not-found"),
    ResultNotFound: _Problem(
        404, "result-not-found", hint="; the result files were deleted or have expired"
    ),
    ProjectionNotFound: _Problem(404, "projection-not-found"),
    # 422 like every other invalid field (the route's header constraint says the same).
    InvalidIdempotencyKey: _Problem(422, "invalid-idempotency-key"),
    IdempotencyKeyReused: _Problem(422, "idempotency-key-reused"),
    IdempotencyKeyInProgress: _Problem(409, "idempotency-key-in-progress", retry=True),
    IdempotencyKeyContended: _Problem(409, None, retry=True),
    # nginx's "client closed request": nobody reads it, but logs and metrics count it apart.
    UploadInterrupted: _Problem(CLIENT_CLOSED_REQUEST, "client-closed-request"),
    JobTooLarge: _Problem(422, "job-too-large"),
    UnsafeUrl: _Problem(422, "unsafe-url"),
    NotConfigured: _Problem(422, "not-configured"),
    SourceUnavailable: _Problem(422, "source-unavailable"),
    QuotaExceeded: _Problem(429, "quota-exceeded", retry=True),
}


class ProblemError(Exception):
    """An error a client can act on; rendered as `application/problem+json`."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        kind: str | None = None,
        errors: Iterable[tuple[str, str]] = (),
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.kind = kind
        self.errors = [{"field": field, "message": message} for field, message in errors]
        self.headers = headers or {}


def not_found(resource: str, ident: str) -> ProblemError:
    """The 404 of an unknown `resource` ("dataset", "job") addressed by the path."""
    return ProblemError(
        404,
        f"no {resource} {ident!r} (it may have been deleted or expired)",
        kind=f"{resource}-not-found",
        errors=[(f"path.{resource}_id", f"unknown {resource}")],
    )


def problem_body(
    status: int,
    detail: str,
    *,
    kind: str | None = None,
    errors: Sequence[dict[str, str]] = (),
    instance: str | None = None,
) -> dict[str, Any]:
    """The JSON object of a problem; `kind` names the problem type (e.g. `invalid-dataset`)."""
    try:
        title = HTTPStatus(status).phrase
    except ValueError:
        title = _TITLES.get(status, "Error")
    return {
        "type": _TYPE_PREFIX + kind if kind else "about:blank",
        "title": title,
        "status": status,
        "detail": detail,
        "instance": instance,
        "errors": list(errors),
    }


def problem_response(
    status: int,
    detail: str,
    *,
    kind: str | None = None,
    errors: Sequence[dict[str, str]] = (),
    instance: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """A problem as a response."""
    body = problem_body(status, detail, kind=kind, errors=errors, instance=instance)
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def _location(loc: Sequence[Any]) -> str:
    return ".".join(str(part) for part in loc)


def _message(err: Mapping[str, Any]) -> str:
    """pydantic's message, without the "Value error, " it puts before a validator's own."""
    message = str(err["msg"])
    prefix = "Value error, "
    if err.get("type") == "value_error" and message.startswith(prefix):
        return message[len(prefix) :]
    return message


def _validation_errors(exc: RequestValidationError) -> list[dict[str, str]]:
    return [
        {"field": _location(err.get("loc", ())), "message": _message(err)} for err in exc.errors()
    ]


async def _on_problem(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ProblemError)
    return problem_response(
        exc.status,
        exc.detail,
        kind=exc.kind,
        errors=exc.errors,
        instance=request.url.path,
        headers=exc.headers,
    )


def problem_of(exc: ServiceError) -> ProblemError:
    """The problem a domain error is rendered as (a 500 for one missing from `_DOMAIN`)."""
    rule = next((_DOMAIN[cls] for cls in type(exc).__mro__ if cls in _DOMAIN), None)
    if rule is None:
        return ProblemError(500, "internal error; the server log has the details")
    return ProblemError(
        rule.status,
        exc.detail + rule.hint,
        kind=rule.kind,
        errors=[] if exc.field is None else [(exc.field, exc.message)],
        headers={"Retry-After": str(_retry_after(exc))} if rule.retry else None,
    )


def _retry_after(exc: ServiceError) -> int:
    """Seconds before a retry may succeed: the error's own figure, or the service's."""
    return int(getattr(exc, "retry_after_s", RETRY_AFTER_S))


async def _on_domain(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    return await _on_problem(request, problem_of(exc))


class _RedisBack:
    """ASGI middleware: the API's outage log hears that Redis answers again from the first
    response below 500 to a request that needs it (``/v1/...``, ``/readyz``) after a 503
    for a lost Redis; it costs nothing while Redis is up."""

    def __init__(self, app: Any, outage: OutageLog) -> None:
        self.app = app
        self.outage = outage

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (
            not self.outage.lost
            or scope["type"] != "http"
            or not scope["path"].startswith(("/v1/", "/readyz"))
        ):
            await self.app(scope, receive, send)
            return

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start" and message["status"] < 500:
                self.outage.success()
            await send(message)

        await self.app(scope, receive, sending)


async def _on_redis_down(request: Request, exc: Exception) -> JSONResponse:
    """Redis unreachable: a 503 the client may retry, not a 500; the log says so once per
    outage (and a reminder now and then), not once per request."""
    outage = getattr(request.app.state, "redis_outage", None)
    if outage is not None:
        outage.failure(exc, f"{request.method} {request.url.path}")
    return problem_response(
        503,
        f"the job store (Redis) is unavailable: {exc}",
        kind="redis-unavailable",
        instance=request.url.path,
        headers=dict(RETRY_AFTER),
    )


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = _validation_errors(exc)
    detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors) or "invalid request"
    return problem_response(
        422, detail, kind="validation", errors=errors, instance=request.url.path
    )


def allowed_methods(request: Request) -> list[str]:
    """Every method the request's path answers, in `_METHODS` order; empty for a path that a
    mount serves (it answers for itself).

    The router's own 405 names the methods of the first route that matches the path only
    (`GET` for `/v1/jobs/{id}`, whose `DELETE` is another route), so every method is tried
    against every route here. A path that a more general template also matches is the
    resource of its most specific documented template (`/v1/jobs/dead-letters` is not a
    job, though `DELETE /v1/jobs/{job_id}` would take it).
    """
    path = request.scope["path"]
    root_path = request.scope.get("root_path", "")
    allowed = []
    for method in _METHODS:
        probe = {"type": "http", "method": method, "path": path, "root_path": root_path}
        for route in request.app.router.routes:
            match, _ = route.matches({**probe, "headers": []})
            if match is Match.FULL:
                if isinstance(route, Mount):
                    return []
                allowed.append(method)
                break
    documented = _documented_methods(request.app, path.removeprefix(root_path) or "/")
    if documented is None:
        return allowed
    return [m for m in allowed if m in documented or m == "HEAD"]


def _documented_methods(app: FastAPI, path: str) -> set[str] | None:
    """The methods the OpenAPI document gives the most specific template matching `path`
    (None if none does: an undocumented route)."""
    best: tuple[int, set[str]] | None = None
    for template, operations in app.openapi().get("paths", {}).items():
        pattern = re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, path):
            params = template.count("{")
            if best is None or params < best[0]:
                best = (params, {method.upper() for method in operations})
    return None if best is None else best[1]


#: FastAPI's 400 for a JSON body it could not read for a reason other than its syntax.
_UNREADABLE_BODY = "There was an error parsing the body"


def _unreadable_body(request: Request, cause: BaseException | None) -> JSONResponse:
    """The problem of a JSON body FastAPI could not read (its own 400 says no more)."""
    if isinstance(cause, ClientDisconnect):
        logger.warning(
            "%s %s: the client disconnected before its body was complete",
            request.method,
            request.url.path,
        )
        return problem_response(
            CLIENT_CLOSED_REQUEST,
            "the client closed the connection before the body was complete",
            kind="client-closed-request",
            instance=request.url.path,
        )
    if isinstance(cause, UnicodeDecodeError):
        reason = "it is not UTF-8 text"
    elif isinstance(cause, RecursionError):
        reason = "it is nested too deeply"
    elif isinstance(cause, ValueError):  # Python's limit on the digits of an integer
        reason = "it holds a number too long to read (over 4300 digits)"
    else:
        reason = "it could not be read"
    return problem_response(
        422,
        f"the body is not valid JSON: {reason}",
        kind="validation",
        errors=[{"field": "body", "message": reason}],
        instance=request.url.path,
    )


async def _on_http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    headers = dict(exc.headers or {})
    if exc.status_code == 400 and detail == _UNREADABLE_BODY:
        return _unreadable_body(request, exc.__cause__)
    if exc.status_code == 404 and detail == "Not Found":
        detail = f"no route matches {request.method} {request.url.path}"
    elif exc.status_code == 405:
        allowed = allowed_methods(request)
        if allowed:
            headers["Allow"] = ", ".join([*allowed, "OPTIONS"])
            if request.method == "OPTIONS":
                # The path exists and OPTIONS asks what it answers (RFC 9110 9.3.7).
                return Response(status_code=204, headers=headers)
        detail = f"{request.method} is not allowed on {request.url.path}"
    return problem_response(exc.status_code, detail, instance=request.url.path, headers=headers)


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unhandled error on %s %s", request.method, request.url.path)
    return problem_response(
        500, "internal error; the server log has the details", instance=request.url.path
    )


def _documents_own_body(response: dict[str, Any]) -> bool:
    """Whether an error response documents a body of its own (`/readyz`'s 503 is a Health),
    not a problem or FastAPI's default validation error."""
    for media in response.get("content", {}).values():
        ref = media.get("schema", {}).get("$ref", "")
        if ref and not ref.endswith(("/Problem", "/HTTPValidationError")):
            return True
    return False


def _document_problems(app: FastAPI) -> None:
    """Make the OpenAPI document say what is sent: every 4xx/5xx is problem+json."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = build()
        problem_ref = {"$ref": "#/components/schemas/Problem"}
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                for code, response in operation.get("responses", {}).items():
                    if code[:1] not in ("4", "5") or _documents_own_body(response):
                        continue
                    response["content"] = {PROBLEM_JSON: {"schema": problem_ref}}
        components = schema.get("components", {}).get("schemas", {})
        components.pop("HTTPValidationError", None)
        components.pop("ValidationError", None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def install_problem_handlers(app: FastAPI) -> None:
    """Render every error of `app` as problem+json (and document it so)."""
    _document_problems(app)
    app.state.redis_outage = OutageLog(logging.getLogger("service.api"))
    app.add_middleware(_RedisBack, outage=app.state.redis_outage)
    app.add_exception_handler(ProblemError, _on_problem)
    app.add_exception_handler(ServiceError, _on_domain)
    app.add_exception_handler(redis.ConnectionError, _on_redis_down)
    app.add_exception_handler(redis.TimeoutError, _on_redis_down)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(Exception, _on_unexpected)
