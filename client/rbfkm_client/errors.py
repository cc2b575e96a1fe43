"""What the client raises: the service's problem details, a service out of reach, a job
that did not succeed, an optional dependency that is missing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

    from rbfkm_client.models import Job


class RbfkmError(Exception):
    """Every error of the client."""


class ApiError(RbfkmError):
    """An error response of the service: its RFC 9457 problem details.

    ``detail`` says what went wrong and what to change; ``errors`` names the offending
    fields (``[{"field": "body.n_clusters", "message": ...}]``); ``type`` is the problem's
    URI (``urn:rbfkm:problem:validation``).
    """

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        title: str = "",
        type: str = "about:blank",
        errors: list[dict[str, str]] | None = None,
        method: str = "",
        url: str = "",
    ) -> None:
        super().__init__(f"{status} {title}: {detail}".replace(" : ", ": "))
        self.status = status
        self.detail = detail
        self.title = title
        self.type = type
        self.errors = errors or []
        self.method = method
        self.url = url

    @property
    def kind(self) -> str:
        """The problem's kind: ``validation``, ``job-not-found``, ... (the URI's tail)."""
        return self.type.rsplit(":", 1)[-1]

    @classmethod
    def from_response(cls, response: httpx.Response) -> ApiError:
        """The error of a response of status >= 400 (problem+json, or any other body)."""
        try:
            body: Any = response.json()
        except ValueError:
            body = None
        request = response.request
        where = {"method": request.method, "url": str(request.url)}
        if not isinstance(body, dict) or "detail" not in body:
            text = response.text.strip()[:500] or response.reason_phrase
            return cls(response.status_code, text, title=response.reason_phrase, **where)
        return cls(
            int(body.get("status", response.status_code)),
            str(body["detail"]),
            title=str(body.get("title", response.reason_phrase)),
            type=str(body.get("type", "about:blank")),
            errors=list(body.get("errors") or []),
            **where,
        )


class ConnectionFailed(RbfkmError):
    """The service could not be reached (or kept answering 429/503) after every retry."""


class JobFailed(RbfkmError):
    """A job waited for ended failed or canceled; ``job`` says how (``job.error``)."""

    def __init__(self, job: Job) -> None:
        reason = f": {job.error}" if job.error else ""
        super().__init__(f"job {job.id} {job.status}{reason}")
        self.job = job


class WaitTimeout(RbfkmError, TimeoutError):
    """A job still unfinished when the wait's time ran out (the job goes on)."""


def require(module: str, extra: str) -> Any:
    """Import an optional dependency, or say which extra installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"this needs {module.split('.')[0]}: pip install 'rbfkm-client[{extra}]'"
        ) from exc
