"""The FastAPI application factory.

`create_app` builds everything a request needs from the settings (the Redis client, the
dataset store, the job queue, the result store, the idempotency store, the metrics registry)
and keeps it on `app.state`; routes reach it through the dependencies in `service.deps`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis
from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from service import __version__
from service.datasets import DatasetStore
from service.idempotency import IdempotencyStore
from service.limits import BodyLimitMiddleware
from service.metrics import HttpMetrics, MetricsMiddleware, QueueCollector
from service.openapi import document_deployment
from service.problems import install_problem_handlers
from service.queue import JobQueue
from service.results import ResultStore
from service.routes import datasets, health, jobs
from service.routes.docs import install_docs
from service.routes.ui import install_ui
from service.settings import Settings, get_settings
from service.tenants import Keyring
from service.uploads import Spooler

DESCRIPTION = """
Annealed RBF-K-Means as a service. Upload a dataset, start a job (`202` + `Location`), poll
it, read the centroids, labels and sparse soft assignments, and predict new points.

Errors are RFC 9457 `application/problem+json`. When API keys are configured, send
`Authorization: Bearer <key>` or `X-API-Key: <key>` (probes and metrics stay open).
"""


def redis_client(url: str) -> redis.Redis:
    """A thread-safe pooled client; short timeouts so probes answer quickly when Redis is down."""
    return redis.Redis.from_url(
        url, socket_connect_timeout=2, socket_timeout=10, health_check_interval=30
    )


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the application for `settings` (the environment's when omitted)."""

    settings = settings or get_settings()
    if not settings.redis_url:
        raise ValueError(
            "REDIS_URL is not set: point it at a Redis server, or use `rbfkm serve`, "
            "which starts an embedded one"
        )
    client = redis_client(settings.redis_url)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        client.close()

    app = FastAPI(
        title="rbfkm",
        version=__version__,
        summary="Annealed RBF-K-Means clustering service",
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # the CDN pages; `install_docs` serves them from package data
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.keyring = Keyring.from_settings(settings)
    app.state.redis = client
    app.state.datasets = DatasetStore.from_settings(client, settings)
    app.state.uploads = Spooler.under(settings.data_dir, settings.max_upload_bytes)
    app.state.results = ResultStore(settings.data_dir)
    app.state.idempotency = IdempotencyStore(
        client, prefix=settings.key_prefix, ttl_s=settings.result_ttl_s
    )
    queue_holder: dict[str, JobQueue] = {}

    def queue() -> JobQueue:
        """Built lazily: creating the consumer group needs Redis, an app must start without."""
        if "queue" not in queue_holder:
            queue_holder["queue"] = JobQueue.from_settings(client, settings)
        return queue_holder["queue"]

    app.state.queue_factory = queue
    registry = CollectorRegistry()
    registry.register(QueueCollector(queue, app.state.keyring.names))
    app.state.registry = registry
    # Inside the metrics, which count its 413s.
    app.add_middleware(
        BodyLimitMiddleware,
        json_bytes=settings.max_json_body_bytes,
        upload_bytes=settings.max_upload_bytes,
    )
    app.add_middleware(MetricsMiddleware, metrics=HttpMetrics(registry))
    install_problem_handlers(app)
    document_deployment(app, settings, app.state.keyring)
    app.include_router(datasets.router)
    app.include_router(jobs.router)
    app.include_router(health.router)
    install_docs(app)
    install_ui(app)
    return app
