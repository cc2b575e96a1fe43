"""Prometheus metrics: HTTP requests and latency, queue depth, jobs by status, job durations,
and per tenant: requests by status class and jobs by status.

Each app gets its own registry (several apps in one test process must not collide). HTTP
metrics come from a pure ASGI middleware (it adds no I/O to a request, so polls stay cheap);
queue figures are read from Redis at scrape time by a collector, so they are never stale.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.jobs import STATUSES, JobStatus

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
JOB_DURATION_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600, float("inf"))
_RECENT_JOBS = 500  # finished jobs sampled for the duration histogram at each scrape
#: Statuses whose jobs ran to an end, timed by the duration histogram.
_TIMED = (JobStatus.SUCCEEDED, JobStatus.FAILED)


class HttpMetrics:
    """Request counter and latency histogram, labelled by route template (not raw path)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "rbfkm_http_requests",
            "HTTP requests by method, route and status.",
            ["method", "route", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "rbfkm_http_request_duration_seconds",
            "HTTP request latency by method and route.",
            ["method", "route"],
            registry=registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
        )

        self.tenant_requests = Counter(
            "rbfkm_tenant_http_requests",
            "Authenticated HTTP requests by tenant and status (429s show quota pressure).",
            ["tenant", "status"],
            registry=registry,
        )

    def observe(
        self, method: str, route: str, status: int, seconds: float, tenant: str | None = None
    ) -> None:
        """Record one finished request (and its tenant's count, once authenticated)."""
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)
        if tenant is not None:
            self.tenant_requests.labels(tenant, str(status)).inc()


class MetricsMiddleware:
    """ASGI middleware that times every HTTP request."""

    def __init__(self, app: ASGIApp, metrics: HttpMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            tenant = scope.get("state", {}).get("tenant")  # set by the caller dependency
            self.metrics.observe(
                scope.get("method", ""), template, status, time.perf_counter() - start, tenant
            )


def _seconds(start: Any, end: Any) -> float | None:
    if not start or not end:
        return None
    try:
        a = start if isinstance(start, datetime) else datetime.fromisoformat(str(start))
        b = end if isinstance(end, datetime) else datetime.fromisoformat(str(end))
    except ValueError:
        return None
    return max(0.0, (b - a).total_seconds())


class QueueCollector(Collector):
    """Reads the queue at scrape time; Redis being down only leaves these series out."""

    def __init__(self, queue_factory: Callable[[], Any], tenants: Iterable[str] = ()) -> None:
        self.queue_factory = queue_factory
        self.tenants = list(tenants)

    def collect(self) -> Iterator[Metric]:
        try:
            queue = self.queue_factory()
            depth = queue.depth()
            counts = queue.status_counts()
            alive = queue.workers_alive()
            by_tenant = {tenant: queue.status_counts(tenant) for tenant in self.tenants}
            finished = []
            for status in _TIMED:
                jobs, _ = queue.list(status=status, limit=_RECENT_JOBS)
                finished.extend(jobs)
        except Exception:  # a scrape must not fail because Redis or the queue is down
            return
        yield GaugeMetricFamily("rbfkm_queue_depth", "Jobs waiting to be claimed.", value=depth)
        yield GaugeMetricFamily("rbfkm_workers_alive", "Workers with a live heartbeat.", alive)
        jobs = GaugeMetricFamily("rbfkm_jobs", "Jobs by status.", labels=["status"])
        for status in STATUSES:
            jobs.add_metric([status.value], float(counts.get(status, 0)))
        yield jobs
        tenant_jobs = GaugeMetricFamily(
            "rbfkm_tenant_jobs", "Jobs by tenant and status.", labels=["tenant", "status"]
        )
        for tenant, tenant_counts in by_tenant.items():
            for status in STATUSES:
                tenant_jobs.add_metric([tenant, status.value], float(tenant_counts[status]))
        yield tenant_jobs
        yield self._durations(finished)

    @staticmethod
    def _durations(finished: list[dict[str, Any]]) -> Metric:
        family = HistogramMetricFamily(
            "rbfkm_job_duration_seconds",
            f"Run time of the most recent finished jobs (up to {_RECENT_JOBS} per status).",
            labels=["status"],
        )
        for status in _TIMED:
            values = [
                s
                for job in finished
                if job.get("status") == status
                and (s := _seconds(job.get("started_at"), job.get("finished_at"))) is not None
            ]
            buckets = [
                (
                    "+Inf" if bound == float("inf") else str(bound),
                    float(sum(v <= bound for v in values)),
                )
                for bound in JOB_DURATION_BUCKETS
            ]
            family.add_metric([status.value], buckets, sum_value=float(sum(values)))
        return family


def render(registry: CollectorRegistry) -> bytes:
    """The text exposition of a registry."""
    return generate_latest(registry)
