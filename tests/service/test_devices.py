"""Devices: the engine's names, the worker's device, a job's device, the per-device lock."""

from __future__ import annotations

from pathlib import Path

import pytest

from rbfkm_engine.device import cuda_count
from service.devices import DeviceLock, DeviceLocks, device_for_index, job_device, worker_device


def test_worker_device_is_canonical() -> None:
    assert worker_device("cpu") == "cpu"
    assert worker_device("auto") == ("cuda:0" if cuda_count() else "cpu")


@pytest.mark.parametrize("device", ["tpu", "", "cuda:99", "cuda:x"])
def test_worker_refuses_devices_this_machine_lacks(device: str) -> None:
    with pytest.raises(ValueError, match="not available here"):
        worker_device(device)


def test_auto_workers_spread_over_the_gpus() -> None:
    assert device_for_index("cpu", 3) == "cpu"
    expected = [f"cuda:{i % cuda_count()}" if cuda_count() else "cpu" for i in range(3)]
    assert [device_for_index("auto", i) for i in range(3)] == expected


def test_job_device_overrides_only_with_a_device_this_machine_has() -> None:
    assert job_device({}, "cpu") == "cpu"
    assert job_device({"device": "auto"}, "cpu") == "cpu"
    assert job_device({"device": "cpu"}, "cuda:0") == "cpu"
    assert job_device({"device": "bogus"}, "cpu") == "cpu"
    assert job_device({"device": "cuda:99"}, "cpu") == "cpu"


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_count(), reason="needs a CUDA device")
def test_a_job_takes_only_its_workers_gpu() -> None:
    # The worker holds its own GPU's lock: a job on another GPU could meet another worker.
    assert job_device({"device": "cuda"}, "cuda:0") == "cuda:0"
    assert job_device({"device": "cuda:0"}, "cpu") == "cpu"


def test_device_lock_is_exclusive_per_scope(tmp_path: Path) -> None:
    first = DeviceLock("cuda:0", tmp_path, scope="a")
    second = DeviceLock("cuda:0", tmp_path, scope="a")
    other_scope = DeviceLock("cuda:0", tmp_path, scope="b")
    other_device = DeviceLock("cpu", tmp_path, scope="a")
    assert first.acquire(0) and first.acquire(0)  # re-entrant for its holder
    assert not second.acquire(0.1)
    assert other_scope.acquire(0) and other_device.acquire(0)
    first.release()
    assert second.acquire(0)
    for lock in (second, other_scope, other_device):
        lock.release()
    first.release()  # releasing twice is harmless


def test_device_locks_take_every_device_or_none(tmp_path: Path) -> None:
    held = DeviceLock("cuda:1", tmp_path)
    assert held.acquire(0)
    locks = DeviceLocks(["cuda:1", "cuda:0"], tmp_path)
    tries = []
    assert not locks.acquire(lambda: tries.append(1) or len(tries) >= 2, step_s=0.01)
    assert len(tries) == 2
    other = DeviceLock("cuda:0", tmp_path)  # given up: cuda:0 is free again
    assert other.acquire(0)
    other.release()
    held.release()
    assert locks.acquire(lambda: True, step_s=0.01)
    assert not DeviceLock("cuda:0", tmp_path).acquire(0)
    locks.release()
    assert DeviceLock("cuda:1", tmp_path).acquire(0)
