"""The size limit of every request body, enforced before the application reads it.

A pure ASGI middleware (FastAPI reads and parses a JSON body before any dependency runs, so
only a layer below the router can refuse one unread). Each request gets its route's limit:
the routes that take a dataset body (:data:`service.routes.bodies.DATASET_BODY`: uploads and
predict) ``RBFKM_MAX_UPLOAD_BYTES``, every other route ``RBFKM_MAX_JSON_BODY_BYTES``. A
declared ``Content-Length`` over the limit is refused before a byte is read; a body without
one (chunked) is counted as it streams and refused at the first chunk past the limit, so a
refused body is never buffered. The refusal is a ``413`` problem that names the limit and
says what to send instead, with ``Connection: close`` (the rest of the body is not read).
"""

from __future__ import annotations

import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import BodyTooLarge
from service.problems import problem_of, problem_response
from service.routes.bodies import takes_upload

#: What a client whose JSON request is too large should do instead.
JSON_HINT = (
    "; a request other than a dataset upload is small: send the data itself with "
    "POST /v1/datasets (JSON, CSV, .npy or Parquet) and refer to it by its id"
)


class BodyLimitMiddleware:
    """Refuse a request body over its route's limit with a ``413``, unread."""

    def __init__(self, app: ASGIApp, *, json_bytes: int, upload_bytes: int) -> None:
        self.app = app
        self.json_bytes = json_bytes
        self.upload_bytes = upload_bytes
        #: The operations whose body is a dataset, read from the OpenAPI document when the
        #: first body arrives (the routes are all there by then).
        self.uploads: list[tuple[str, re.Pattern[str]]] | None = None

    def refusal(self, scope: Scope) -> BodyTooLarge:
        """The error a body over this request's limit gets (it carries the limit)."""
        if self.uploads is None:
            self.uploads = upload_operations(scope["app"].openapi())
        path = scope["path"].removeprefix(scope.get("root_path", "")) or "/"
        if any(scope["method"] == m and p.fullmatch(path) for m, p in self.uploads):
            return BodyTooLarge(self.upload_bytes)
        return BodyTooLarge(self.json_bytes, "RBFKM_MAX_JSON_BODY_BYTES", JSON_HINT)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is None and b"transfer-encoding" not in headers:
            await self.app(scope, receive, send)  # no body
            return
        error = self.refusal(scope)
        if length is not None and length.isdigit() and int(length) > error.max_bytes:
            await _refuse(scope, receive, send, error)
            return
        received = 0
        refused = False
        started = False

        async def counted() -> Message:
            nonlocal received, refused
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > error.max_bytes:
                    refused = True
                    raise error
            return message

        async def guarded(message: Message) -> None:
            nonlocal started
            if refused and not started:
                return  # the app's answer to the refused body: the 413 below goes instead
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, guarded)
        except Exception:  # past the limit the app's own failure is moot: the 413 is the answer
            if not refused:
                raise
        if refused and not started:
            await _refuse(scope, receive, send, error)


def upload_operations(document: dict[str, Any]) -> list[tuple[str, re.Pattern[str]]]:
    """(method, path pattern) of every operation an OpenAPI document gives a dataset body."""
    found = []
    for template, operations in document.get("paths", {}).items():
        pattern = re.compile(re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(template)))
        for method, operation in operations.items():
            if takes_upload(operation):
                found.append((method.upper(), pattern))
    return found


async def _refuse(scope: Scope, receive: Receive, send: Send, error: BodyTooLarge) -> None:
    """Send the 413 of ``error``; the connection closes after it (the body stays unread)."""
    problem = problem_of(error)
    response = problem_response(
        problem.status,
        problem.detail,
        kind=problem.kind,
        errors=problem.errors,
        instance=scope.get("path"),
        headers={"Connection": "close"},
    )
    await response(scope, receive, send)
