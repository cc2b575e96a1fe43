"""The embedded Redis of `rbfkm serve`: a real redis-server that starts, persists its data
under the data dir, stops, and starts again with the data it had."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import redis

from service.embedded import EmbeddedRedis, free_port, redis_server_binary
from service.queue import JobQueue


def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_connect_timeout=1)


def test_the_bundled_binary_is_an_executable() -> None:
    binary = Path(redis_server_binary())
    assert binary.is_file() and os.access(binary, os.X_OK)


def test_a_free_port_can_be_bound() -> None:
    port = free_port()
    assert 0 < port < 65536
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_no_url_before_a_port_is_chosen(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path)
    with pytest.raises(RuntimeError, match="not started"):
        _ = server.url
    assert EmbeddedRedis(tmp_path, port=6399).url == "redis://127.0.0.1:6399/0"


def test_stop_is_harmless_when_nothing_runs(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path)
    server.stop()
    assert server.process is None and not (tmp_path / "redis").exists()


def test_it_serves_on_loopback_with_an_append_only_file(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path) as server:
        client = _client(server.url)
        assert server.url == f"redis://127.0.0.1:{server.port}/0"
        assert client.config_get("bind")["bind"] == "127.0.0.1"
        assert client.config_get("appendonly")["appendonly"] == "yes"
        assert client.config_get("protected-mode")["protected-mode"] == "yes"
        assert Path(client.config_get("dir")["dir"]) == (tmp_path / "redis").resolve()
        client.close()
    assert (tmp_path / "redis" / "redis.log").is_file()


def test_embedded_redis_persists_and_stops(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path)
    with server:
        client = redis.Redis.from_url(server.url)
        client.set("k", "v")
        client.close()
    assert server.process is None
    assert list((tmp_path / "redis").rglob("*.aof*")), "AOF files under {data_dir}/redis"
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(server.url, socket_connect_timeout=1).ping()
    with EmbeddedRedis(tmp_path, port=free_port()) as again:
        assert redis.Redis.from_url(again.url).get("k") == b"v", "data survives a restart"


def test_queued_jobs_survive_a_restart_on_the_same_port(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path)
    url = server.start()
    client = _client(url)
    job = JobQueue(client, prefix="t").submit("ds", {"n_clusters": 2})
    client.close()
    server.stop()
    server.stop()  # a second stop changes nothing
    assert server.start() == url, "the same server keeps its port"
    try:
        queue = JobQueue(_client(url), prefix="t")
        assert queue.get(job["id"])["status"] == "queued"  # type: ignore[index]
        claim = queue.claim("w", block_ms=100)
        assert claim is not None and claim.job_id == job["id"]
    finally:
        server.stop()


def test_a_server_that_died_is_stopped_without_error(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path)
    server.start()
    assert server.process is not None
    server.process.kill()
    server.process.wait()
    server.stop()
    assert server.process is None


def test_a_port_taken_by_another_redis_fails_to_start(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path / "first") as first:
        second = EmbeddedRedis(tmp_path / "second", port=first.port)
        try:
            with pytest.raises(RuntimeError, match="did not start"):
                second.start()
        finally:
            second.stop()


def test_a_running_server_is_not_started_twice(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path) as server:
        assert server.process is not None
        pid = server.process.pid
        with pytest.raises(RuntimeError, match="already runs"):
            server.start()
        assert server.process.pid == pid and server.process.poll() is None
