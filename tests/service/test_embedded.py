"""The embedded Redis of `rbfkm serve`: a real redis-server that starts, persists its data
under the data dir, stops, and starts again with the data it had."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from service.embedded import PID_FILE, EmbeddedRedis, _serves, free_port, redis_server_binary
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


def _dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and PR_SET_PDEATHSIG")
def test_a_server_left_by_a_killed_owner_is_stopped_before_a_start(tmp_path: Path) -> None:
    """Its owner was killed (`kill -9` of `rbfkm serve`): the next start on the directory
    stops the old server first (it flushes its AOF), so two never append to one file, and
    the new one has the data."""
    old = EmbeddedRedis(tmp_path)
    old.start()
    assert old.process is not None
    left, old.process = old.process, None  # as a killed owner leaves it
    (tmp_path / "redis" / PID_FILE).write_text(f"{left.pid} {_dead_pid()}\n")
    client = _client(old.url)
    client.set("k", "v")
    client.close()
    with EmbeddedRedis(tmp_path) as new:
        assert left.poll() == 0, "stopped with SIGTERM, cleanly"
        assert redis.Redis.from_url(new.url).get("k") == b"v"
        assert (tmp_path / "redis" / PID_FILE).read_text().split()[0] == str(new.process.pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and PR_SET_PDEATHSIG")
def test_a_server_whose_owner_runs_is_left_alone(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path) as first:
        owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            (tmp_path / "redis" / PID_FILE).write_text(f"{first.process.pid} {owner.pid}\n")
            with pytest.raises(RuntimeError, match=f"belongs to process {owner.pid}"):
                EmbeddedRedis(tmp_path).start()
            assert first.process is not None and first.process.poll() is None
        finally:
            owner.kill()
            owner.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG")
def test_the_server_dies_with_its_owner(tmp_path: Path) -> None:
    """`kill -9` of the process that started it: the kernel stops the server too."""
    script = (
        "import sys, time\n"
        "from service.embedded import EmbeddedRedis\n"
        f"server = EmbeddedRedis({str(tmp_path)!r})\n"
        "server.start()\n"
        "print(server.process.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(owner.stdout.readline())  # type: ignore[union-attr]
        assert _serves(pid, tmp_path / "redis")
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + 15
    while _serves(pid, tmp_path / "redis"):
        assert time.monotonic() < deadline, f"redis-server {pid} outlived its owner"
        time.sleep(0.05)
