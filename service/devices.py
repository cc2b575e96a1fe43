"""Devices for the workers: which one a worker runs on, which one a job gets, and the lock
that lets one job at a time use a device.

Names and their resolution are the engine's (:mod:`rbfkm_engine.device`, torch-free until a
name is resolved against the machine); this module adds what only the service needs: one
spelling per device so every worker of a machine locks the same file, the spreading of
``auto`` workers over the GPUs, and the per-machine lock itself.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rbfkm_engine.device import DEVICE_HELP, canonical_device, cuda_count, is_available

log = logging.getLogger(__name__)


def worker_device(configured: str) -> str:
    """The canonical device a worker configured with ``configured`` runs on.

    ``auto`` -> ``cuda:0`` when there is a GPU, else ``cpu``; ``cuda`` -> ``cuda:0``. Raises
    ``ValueError`` when this machine has no such device: a worker that cannot run anything
    should fail at start, not on every job.
    """
    device = canonical_device(configured)
    if not is_available(device):
        raise ValueError(f"device {configured!r} is not available here: use {DEVICE_HELP}")
    return device


def device_for_index(configured: str, index: int) -> str:
    """Worker ``index`` of several: with ``auto``, spread over the GPUs (or use the CPU)."""
    if configured != "auto":
        return configured
    count = cuda_count()
    return f"cuda:{index % count}" if count else "cpu"


def job_device(params: Mapping[str, Any], default: str) -> str:
    """A job's own ``device`` overrides the worker's only for the CPU or the worker's own
    GPU (canonical: ``"cuda"`` is ``"cuda:0"``).

    The worker holds its device's lock while a job runs, so a job may not take another
    GPU (another worker may be running there). A job asking for a device it cannot have
    still runs, on the worker's device: the API cannot know which worker takes the job.
    """
    requested = params.get("device")
    if not requested or requested == "auto":
        return default
    if isinstance(requested, str) and is_available(requested):
        name = canonical_device(requested)
        if name in ("cpu", default):
            return name
    log.warning("job asks for device %r, not this worker's; using %s", requested, default)
    return default


class DeviceLock:
    """An exclusive per-machine lock on one device, held while a job runs on it.

    The lock file lives in a local directory (the temp dir by default, never the shared
    data dir: each machine has its own devices). ``scope`` names the deployment, so the
    workers of one service take turns on a device while an unrelated one (another data dir
    or key prefix, a test run) is not blocked by them.
    """

    def __init__(self, device: str, lock_dir: Path | str | None = None, scope: str = "") -> None:
        directory = Path(lock_dir) if lock_dir is not None else Path(tempfile.gettempdir())
        name = re.sub(r"[^A-Za-z0-9]+", "_", device)
        tag = hashlib.sha1(scope.encode()).hexdigest()[:12]
        self.path = directory / f"rbfkm-{tag}-device-{name}.lock"
        self._fd: int | None = None

    def acquire(self, timeout_s: float) -> bool:
        """Take the lock, waiting up to ``timeout_s``; False if another holder kept it."""
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(0.05)
                continue
            self._fd = fd
            return True

    def release(self) -> None:
        """Let the next job (of any worker on this machine) use the device."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


class DeviceLocks:
    """The locks of several devices for one job (a parallel fit over GPUs), taken in one
    order (by name) with no other lock held: two workers that each want several devices
    then never wait for each other forever."""

    def __init__(
        self, devices: list[str], lock_dir: Path | str | None = None, scope: str = ""
    ) -> None:
        self.locks = [DeviceLock(name, lock_dir, scope) for name in sorted(set(devices))]

    def acquire(self, should_stop: Callable[[], bool], step_s: float = 0.1) -> bool:
        """Take every lock, waiting as long as it takes; False (none held) once
        ``should_stop`` says stop first."""
        for lock in self.locks:
            while not lock.acquire(step_s):
                if should_stop():
                    self.release()
                    return False
        return True

    def release(self) -> None:
        """Let other jobs use the devices."""
        for lock in self.locks:
            lock.release()
