"""A live service for the client's tests: real uvicorn, real Redis, one spawned worker,
with an API key (so every test also shows the client sends it)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from rbfkm_client import Client

from tests.service.conftest import blobs, live_server, make_settings, private_db, wait_for

KEY = "client-secret"
#: The key of a tenant allowed one unfinished job at a time.
TIGHT_KEY = "client-tight"
#: The dataset most tests cluster: three well-separated blobs.
X = blobs(300, 2, 3, seed=3)


@dataclass(frozen=True)
class Live:
    url: str
    key: str


@pytest.fixture(scope="session")
def live(redis_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with private_db(redis_server, 7) as redis_url:
        settings = make_settings(
            redis_url,
            tmp_path_factory.mktemp("client-data"),
            key_prefix="client",
            api_keys={"main": [KEY], "tight": {"keys": [TIGHT_KEY], "max_active_jobs": 1}},
            url_allowlist=["127.0.0.1"],  # the service reads URLs of a test's file server
        )
        with live_server(settings, tmp_path_factory.mktemp("client-tmp")) as url:
            wait_for(lambda: httpx.get(f"{url}/readyz").status_code == 200, 120, "a worker")
            yield Live(url, KEY)


@pytest.fixture
def client(live: Live) -> Iterator[Client]:
    with Client(live.url, live.key, timeout=30) as connected:
        yield connected
