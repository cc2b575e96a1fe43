"""`rbfkm serve | api | worker`: run the service, or one half of it.

- `serve`: everything in one command. Without `REDIS_URL` it starts the embedded Redis
  (data under `{data_dir}/redis`), `settings.workers` worker processes and the API; a
  worker or the embedded Redis that dies is started again (see :mod:`service.supervisor`).
- `api`: the HTTP API only (needs `REDIS_URL`).
- `worker`: worker processes only (needs `REDIS_URL`: the embedded Redis of a `serve` is
  private to it, so workers elsewhere cannot share it).
- `fit-distributed`: the engine's batch fit of shard files (:mod:`rbfkm_engine.distributed`),
  run under torchrun on any number of nodes; no service needed (docs/distributed.md).
- `fit`, `jobs`, `datasets`: the client's commands (:mod:`rbfkm_client.cli`, also the
  torch-free `rbfkm-client`), to use a running service.

Command-line options override the environment (see docs/service.md for every variable).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rbfkm_client import cli as client_cli

from rbfkm_engine.device import DEVICE_HELP
from service import __version__
from service.settings import Settings


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rbfkm", description="The rbfkm clustering service.")
    parser.add_argument("--version", action="version", version=f"rbfkm {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def http_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--host", help="Address to bind (RBFKM_HOST; default 127.0.0.1).")
        sub.add_argument("--port", type=int, help="Port (RBFKM_PORT; default 8000).")

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--data-dir", type=Path, help="Shared data directory (RBFKM_DATA_DIR).")
        sub.add_argument("--redis-url", help="Redis to use (REDIS_URL).")

    serve = commands.add_parser("serve", help="Redis (embedded unless REDIS_URL), workers and API.")
    http_options(serve)
    common(serve)
    serve.add_argument("--workers", type=int, help="Worker processes (RBFKM_WORKERS).")
    api = commands.add_parser("api", help="The HTTP API only (needs REDIS_URL).")
    http_options(api)
    common(api)
    worker = commands.add_parser("worker", help="Worker processes only (needs REDIS_URL).")
    common(worker)
    worker.add_argument("--workers", type=int, help="Processes to run (RBFKM_WORKERS).")
    worker.add_argument("--device", help=f"{DEVICE_HELP} (RBFKM_DEVICE).")
    batch = commands.add_parser(
        "fit-distributed",
        help="Fit shard files across torchrun's processes (docs/distributed.md).",
        add_help=False,
    )
    batch.add_argument("engine_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    client_cli.add_commands(commands)
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    """The environment's settings with the command-line options laid over them."""
    overrides: dict[str, Any] = {}
    for option, field in (
        ("host", "host"),
        ("port", "port"),
        ("data_dir", "data_dir"),
        ("redis_url", "REDIS_URL"),  # the field is read by its alias
        ("workers", "workers"),
        ("device", "device"),
    ):
        value = getattr(args, option, None)
        if value is not None:
            overrides[field] = value
    return Settings(**overrides)


def _run_api(settings: Settings) -> None:
    import uvicorn

    from service.app import create_app

    app = create_app(settings)
    received: list[int] = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        # uvicorn re-raises the signal that stopped it once it has shut down; with the
        # default handlers that would kill this process before it stops workers and Redis.
        signal.signal(signum, lambda sig, _: received.append(sig))
    print(f"rbfkm API on http://{settings.host}:{settings.port}", flush=True)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level="info",
        access_log=settings.access_log,
    )


def _log_to_stderr() -> None:
    """Show the service's own log lines (the supervisors', the API's) next to uvicorn's,
    which configures only its own loggers; the workers do the same in their processes."""
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )


def serve(settings: Settings) -> int:
    """Run Redis (embedded unless REDIS_URL is set), workers and the API until a signal."""
    from service.embedded import EmbeddedRedis
    from service.supervisor import RedisSupervisor, WorkerSupervisor

    _log_to_stderr()
    embedded: RedisSupervisor | None = None
    supervisor: WorkerSupervisor | None = None
    try:
        if not settings.redis_url:
            # A redis-server that dies is restarted on the same port and data dir (its AOF
            # replays); the API's and workers' clients reconnect on their next command.
            embedded = RedisSupervisor(EmbeddedRedis(settings.data_dir)).start()
            server = embedded.server
            pid = server.process.pid if server.process else None
            print(f"rbfkm embedded Redis on {server.url} (pid {pid}, data in {server.dir})",
                  flush=True)  # fmt: skip
            settings = settings.model_copy(update={"redis_url": server.url})
        # Workers that die are replaced: their jobs are taken over once the lease lapses.
        supervisor = WorkerSupervisor(settings, settings.workers).start()
        _run_api(settings)  # uvicorn returns on SIGINT / SIGTERM
    finally:
        if supervisor is not None:
            supervisor.stop()  # the workers hand their jobs back through Redis: it goes last
        if embedded is not None:
            embedded.stop()
    return 0


def _needs_redis(settings: Settings, command: str) -> None:
    if not settings.redis_url:
        sys.exit(
            f"rbfkm {command}: REDIS_URL is not set. The embedded Redis of `rbfkm serve` is "
            "private to that process; run a Redis server and point REDIS_URL at it, or use "
            "`rbfkm serve` for a single-machine setup."
        )


def run_workers(settings: Settings) -> int:
    """Run worker(s) until SIGINT/SIGTERM: one in this process, or `settings.workers` children."""
    from service.supervisor import WorkerSupervisor
    from service.worker import run_worker_process

    print(f"rbfkm worker(s) on {settings.redis_url}", flush=True)
    if settings.workers <= 1:
        # One worker in this process: if it dies, so does the command, for the process
        # manager (compose, systemd, Kubernetes) to restart.
        run_worker_process(settings)  # handles SIGINT/SIGTERM: finishes the job, then returns
        return 0
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    with WorkerSupervisor(settings, settings.workers):
        stop.wait()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The `rbfkm` console script."""
    args = build_parser().parse_args(argv)
    if args.command in client_cli.COMMANDS:
        return client_cli.run(args, prog="rbfkm")
    if args.command == "fit-distributed":
        from rbfkm_engine.distributed import main as fit_distributed

        return fit_distributed(args.engine_args, prog="rbfkm fit-distributed")
    settings = settings_from(args)
    if args.command == "serve":
        return serve(settings)
    if args.command == "api":
        _needs_redis(settings, "api")
        _run_api(settings)
        return 0
    _needs_redis(settings, "worker")
    return run_workers(settings)


if __name__ == "__main__":
    sys.exit(main())
