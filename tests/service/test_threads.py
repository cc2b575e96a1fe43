"""The workers' CPU threads: the cores the cgroup quota and the affinity mask leave, each
worker's share, the override, and real worker processes started with their share."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import redis

from service import threads
from service.supervisor import WorkerSupervisor
from service.worker import spawn_workers
from tests.service.conftest import make_settings, wait_for

# ---- cgroup files -------------------------------------------------------------------------


def _cgroup(root: Path, own: str, files: dict[str, str]) -> Path:
    """A fake cgroup tree under ``root`` with ``files`` (paths relative to it) and the
    ``/proc/self/cgroup`` that names ``own``; returns the latter's path."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    proc = root / "proc-self-cgroup"
    proc.write_text(own)
    return proc


@pytest.mark.parametrize(
    ("text", "cores"),
    [
        ("max 100000", None),
        ("150000 100000", 1.5),
        ("50000 100000", 0.5),
        ("max", None),
        ("", None),
    ],
)
def test_cpu_max_is_a_quota_over_a_period(text: str, cores: float | None) -> None:
    assert threads.parse_cpu_max(text) == cores


def test_v1_quota_of_minus_one_is_no_limit() -> None:
    assert threads.parse_cfs("-1\n", "100000\n") is None
    assert threads.parse_cfs("250000\n", "100000\n") == 2.5
    assert threads.parse_cfs("oops", "100000") is None


def test_a_v2_quota_at_the_root_bounds_the_cores(tmp_path: Path) -> None:
    proc = _cgroup(tmp_path, "0::/\n", {"cpu.max": "150000 100000"})
    assert threads.cgroup_cpu_quota(tmp_path, proc) == 1.5
    assert threads.usable_cores(8, root=tmp_path, proc_cgroup=proc) == 2  # rounded up
    assert threads.usable_cores(1, root=tmp_path, proc_cgroup=proc) == 1  # affinity lower


def test_no_v2_quota_leaves_the_affinity(tmp_path: Path) -> None:
    proc = _cgroup(tmp_path, "0::/\n", {"cpu.max": "max 100000"})
    assert threads.cgroup_cpu_quota(tmp_path, proc) is None
    assert threads.usable_cores(4, root=tmp_path, proc_cgroup=proc) == 4


def test_a_quota_below_one_core_still_gives_one_thread(tmp_path: Path) -> None:
    proc = _cgroup(tmp_path, "0::/\n", {"cpu.max": "20000 100000"})
    assert threads.usable_cores(4, root=tmp_path, proc_cgroup=proc) == 1


def test_the_lowest_quota_along_the_process_s_groups_counts(tmp_path: Path) -> None:
    proc = _cgroup(
        tmp_path,
        "0::/app.slice/worker\n",
        {
            "cpu.max": "max 100000",
            "app.slice/cpu.max": "300000 100000",
            "app.slice/worker/cpu.max": "max 100000",
        },
    )
    assert threads.cgroup_cpu_quota(tmp_path, proc) == 3.0
    assert threads.usable_cores(16, root=tmp_path, proc_cgroup=proc) == 3


@pytest.mark.parametrize("mount", ["cpu", "cpu,cpuacct"])
def test_v1_cfs_quota_and_period(tmp_path: Path, mount: str) -> None:
    own = "4:memory:/x\n3:cpu,cpuacct:/docker/abc\n0::/\n"
    proc = _cgroup(
        tmp_path,
        own,
        {
            f"{mount}/docker/abc/cpu.cfs_quota_us": "150000",
            f"{mount}/docker/abc/cpu.cfs_period_us": "100000",
            f"{mount}/cpu.cfs_quota_us": "-1",
            f"{mount}/cpu.cfs_period_us": "100000",
        },
    )
    assert threads.cgroup_cpu_quota(tmp_path, proc) == 1.5
    assert threads.usable_cores(4, root=tmp_path, proc_cgroup=proc) == 2


def test_inside_a_cgroup_namespace_the_root_files_are_the_process_s(tmp_path: Path) -> None:
    # The path names a group the namespace does not show: the root's files are its own.
    proc = _cgroup(tmp_path, "0::/../../kubepods/pod1\n", {"cpu.max": "200000 100000"})
    assert threads.cgroup_cpu_quota(tmp_path, proc) == 2.0


def test_no_cgroup_files_means_no_quota(tmp_path: Path) -> None:
    assert threads.cgroup_cpu_quota(tmp_path, tmp_path / "missing") is None
    assert threads.usable_cores(3, root=tmp_path, proc_cgroup=tmp_path / "missing") == 3


def test_this_process_has_at_least_one_usable_core() -> None:
    assert 1 <= threads.usable_cores() <= len(os.sched_getaffinity(0))


# ---- the split ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cores", "workers", "shares"),
    [
        (4, 3, [2, 1, 1]),
        (2, 2, [1, 1]),
        (8, 1, [8]),
        (2, 3, [1, 1, 1]),  # more workers than cores: one thread each
        (16, 4, [4, 4, 4, 4]),
    ],
)
def test_the_cores_are_split_between_the_workers(
    cores: int, workers: int, shares: list[int]
) -> None:
    assert [threads.share_of_cores(cores, workers, i) for i in range(workers)] == shares
    assert sum(shares) == max(cores, workers)


def test_the_override_wins_over_the_share() -> None:
    assert threads.worker_threads(3, workers=4, index=1, cores=2) == 3
    assert threads.worker_threads(None, workers=3, index=0, cores=4) == 2
    assert threads.worker_threads(None, workers=3, index=2, cores=4) == 1


def test_cpu_workers_take_turns_so_each_gets_every_core() -> None:
    assert threads.fitting_at_once(3, "cpu") == 1
    assert threads.fitting_at_once(3, "auto") == 3
    assert threads.fitting_at_once(2, "cuda:1") == 2
    assert threads.fitting_at_once(0, "auto") == 1


def test_the_child_environment_is_set_for_the_block_then_restored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    env = threads.thread_environment(2)
    assert set(env) == set(threads.THREAD_ENV_VARS) and set(env.values()) == {"2"}
    with threads.child_environment(env):
        assert os.environ["OMP_NUM_THREADS"] == os.environ["MKL_NUM_THREADS"] == "2"
    assert os.environ["OMP_NUM_THREADS"] == "7"
    assert "MKL_NUM_THREADS" not in os.environ


# ---- real worker processes ----------------------------------------------------------------


def _environ(pid: int) -> dict[str, str]:
    """The environment a process was started with."""
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(entry.decode().partition("=")[::2] for entry in raw if entry)


def _reported(capfd: pytest.CaptureFixture[str], seen: list[str], pid: int) -> int | None:
    """The thread count worker ``pid`` logged at its start (None until it has)."""
    seen.append(capfd.readouterr().err)
    found = re.search(rf"\(pid {pid}\) fits on (\d+) CPU threads", "".join(seen))
    return int(found.group(1)) if found else None


def test_supervised_workers_start_with_their_share_of_the_cores(
    redis_server: str,
    redis_client: redis.Redis,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    # "auto" counts every worker (on the CPU, "cpu" workers take turns and get every core).
    settings = make_settings(redis_server, tmp_path, device="auto")
    cores = threads.usable_cores()
    before = {name: os.environ.get(name) for name in threads.THREAD_ENV_VARS}
    seen: list[str] = []
    with WorkerSupervisor(settings, 2) as supervisor:
        for index, process in enumerate(supervisor.processes):
            pid = process.pid
            assert pid is not None
            share = threads.share_of_cores(cores, 2, index)
            logged = wait_for(lambda pid=pid: _reported(capfd, seen, pid), 60, "the log line")
            assert logged == share
            # Read after the log line: before the spawn's exec, /proc shows the parent's.
            environ = _environ(pid)
            assert {name: environ.get(name) for name in threads.THREAD_ENV_VARS} == (
                threads.thread_environment(share)
            )
    assert {name: os.environ.get(name) for name in threads.THREAD_ENV_VARS} == before


def test_threads_per_worker_overrides_the_share(
    redis_server: str,
    redis_client: redis.Redis,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    settings = make_settings(redis_server, tmp_path, threads_per_worker=3)
    (process,) = spawn_workers(settings, 1)
    try:
        pid = process.pid
        assert pid is not None
        seen: list[str] = []
        assert wait_for(lambda: _reported(capfd, seen, pid), 60, "the log line") == 3
        assert _environ(pid)["OMP_NUM_THREADS"] == "3"  # the exec has happened by now
    finally:
        process.terminate()
        process.join(15)


def test_the_most_threads_of_a_worker() -> None:
    assert threads.most_worker_threads(3) == 3
    assert threads.most_worker_threads(0) == 1
    assert threads.most_worker_threads(None) == threads.usable_cores()
