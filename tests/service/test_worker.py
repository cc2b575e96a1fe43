"""Worker against a real Redis and the real engine: runs, failures, cancel, leases, processes."""

from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import redis
import torch

from rbfkm_engine import FitInterrupted, RBFKMeans
from service.devices import DeviceLock
from service.embedded import EmbeddedRedis, free_port
from service.queue import JobQueue
from service.results import ResultStore
from service.settings import Settings
from service.worker import Timing, Worker, dataset_loader, spawn_workers
from tests.service.conftest import committed, wait_for

PARAMS = {"n_clusters": 3, "random_state": 0, "max_iter": 40}
SLOW = {"n_clusters": 3, "random_state": 0, "max_iter": 300, "tol": 0.0}


class SlowRBFKMeans(RBFKMeans):
    """The real estimator, slowed down per iteration so a test can act mid-fit."""

    delay_s: ClassVar[float] = 0.05
    fits: ClassVar[list[RBFKMeans]] = []

    def fit(
        self,
        X: Any,
        y: Any = None,
        sample_weight: Any = None,
        *,
        callback: Any = None,
        should_stop: Any = None,
    ):
        def slow(progress: Any) -> Any:
            time.sleep(self.delay_s)
            return callback(progress) if callback is not None else None

        SlowRBFKMeans.fits.append(self)
        self.interrupted = False  # set when the worker's should_stop ended the fit
        try:
            return super().fit(X, y, sample_weight, callback=slow, should_stop=should_stop)
        except FitInterrupted:
            self.interrupted = True
            raise


class SlowerRBFKMeans(SlowRBFKMeans):
    """Slow enough that a whole fit (about 20 iterations) lasts several seconds."""

    delay_s: ClassVar[float] = 0.2


def _blobs(n: int = 90, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])
    return (centres[rng.integers(0, 3, n)] + rng.normal(scale=0.7, size=(n, 2))).astype(np.float32)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    (tmp_path / "datasets").mkdir()
    np.save(tmp_path / "datasets" / "ds.npy", _blobs())
    return tmp_path


@pytest.fixture
def make_queue(redis_client: redis.Redis) -> Callable[..., JobQueue]:
    def make(**kwargs: Any) -> JobQueue:
        kwargs.setdefault("prefix", "w")
        return JobQueue(redis_client, **kwargs)

    return make


@pytest.fixture
def queue(make_queue: Callable[..., JobQueue]) -> JobQueue:
    return make_queue()


@pytest.fixture
def results(data_dir: Path) -> ResultStore:
    return ResultStore(data_dir)


@pytest.fixture
def make_worker(data_dir: Path, results: ResultStore) -> Callable[..., Worker]:
    def make(queue: JobQueue, **kwargs: Any) -> Worker:
        kwargs.setdefault("device", "cpu")
        kwargs.setdefault("lock_dir", data_dir)
        return Worker(queue, results, dataset_loader(data_dir), **kwargs)

    return make


@pytest.fixture(autouse=True)
def _forget_slow_fits() -> Iterator[None]:
    SlowRBFKMeans.fits.clear()
    yield
    SlowRBFKMeans.fits.clear()


def _run_in_thread(worker: Worker, block_ms: int = 200) -> threading.Thread:
    thread = threading.Thread(target=worker.run_once, kwargs={"block_ms": block_ms}, daemon=True)
    thread.start()
    return thread


def _status(queue: JobQueue, job_id: str) -> str | None:
    job = queue.get(job_id)
    return None if job is None else job["status"]


def _running_with_progress(queue: JobQueue, job_id: str) -> bool:
    job = queue.get(job_id)
    return bool(job and job["status"] == "running" and job["progress"]["iteration"])


def test_run_once_fits_stores_and_matches_the_engine(
    queue: JobQueue,
    make_worker: Callable[..., Worker],
    results: ResultStore,
    data_dir: Path,
) -> None:
    worker = make_worker(queue)
    assert worker.run_once(block_ms=50) is None
    job_id = queue.submit("ds", PARAMS)["id"]
    assert worker.run_once(block_ms=200) == job_id

    job = queue.get(job_id)
    assert job is not None
    assert (job["status"], job["attempts"], job["error"]) == ("succeeded", 1, None)
    assert job["progress"]["fraction"] == 1.0
    assert job["progress"]["iteration"] is not None
    assert job["finished_at"] is not None
    meta = committed(queue, job_id)
    assert meta is not None
    assert (meta["attempt"], meta["n_samples"], meta["n_clusters"]) == (1, 90, 3)

    X = np.load(data_dir / "datasets" / "ds.npy")
    direct = RBFKMeans(**PARAMS, device="cpu").fit(X)
    np.testing.assert_array_equal(results.labels(job_id), direct.labels_)
    np.testing.assert_allclose(results.summary(job_id)["centroids"], direct.cluster_centers_)
    assert results.summary(job_id)["inertia"] == pytest.approx(direct.inertia_)
    assert worker.run_once(block_ms=50) is None


@pytest.mark.parametrize(
    ("params", "dataset", "message"),
    [
        ({"n_clusters": 500}, "ds", "n_clusters"),
        ({"n_clusters": 3, "no_such_option": 1}, "ds", "no_such_option"),
        ({"n_clusters": 3, "assignment": "bogus"}, "ds", "assignment"),
        ({"n_clusters": 3}, "missing", "not found"),
    ],
)
def test_bad_input_fails_at_once(
    queue: JobQueue,
    make_worker: Callable[..., Worker],
    results: ResultStore,
    params: dict[str, Any],
    dataset: str,
    message: str,
) -> None:
    job_id = queue.submit(dataset, params)["id"]
    assert make_worker(queue).run_once(block_ms=200) == job_id
    job = queue.get(job_id)
    assert job is not None
    assert (job["status"], job["attempts"]) == ("failed", 1)
    assert message in job["error"]
    assert queue.dead_letters()[0][0]["job_id"] == job_id
    assert not results.exists(job_id)


def test_crashes_are_retried_then_dead_lettered(
    queue: JobQueue, results: ResultStore, data_dir: Path
) -> None:
    def broken(dataset_id: str) -> np.ndarray:
        raise OSError("disk hiccup")

    worker = Worker(queue, results, broken, device="cpu", lock_dir=data_dir)
    job_id = queue.submit("ds", PARAMS)["id"]
    seen = []
    for _ in range(3):
        assert worker.run_once(block_ms=200) == job_id
        job = queue.get(job_id)
        assert job is not None
        seen.append((job["status"], job["attempts"]))
    assert seen == [("queued", 1), ("queued", 2), ("failed", 3)]
    job = queue.get(job_id)
    assert job is not None
    assert "disk hiccup" in job["error"]
    assert queue.dead_letters()[0][0]["job_id"] == job_id
    assert worker.run_once(block_ms=50) is None


def test_transient_crash_then_success(
    queue: JobQueue, results: ResultStore, data_dir: Path
) -> None:
    load = dataset_loader(data_dir)
    calls = []

    def flaky(dataset_id: str) -> np.ndarray:
        calls.append(dataset_id)
        if len(calls) == 1:
            raise ConnectionResetError("shared disk went away")
        return load(dataset_id)

    worker = Worker(queue, results, flaky, device="cpu", lock_dir=data_dir)
    job_id = queue.submit("ds", PARAMS)["id"]
    worker.run_once(block_ms=200)
    worker.run_once(block_ms=200)
    job = queue.get(job_id)
    assert job is not None
    assert (job["status"], job["attempts"], job["error"]) == ("succeeded", 2, None)
    assert results.summary(job_id)["attempt"] == 2


def test_canceled_queued_job_never_runs(
    queue: JobQueue, results: ResultStore, data_dir: Path
) -> None:
    calls: list[str] = []

    def load(dataset_id: str) -> np.ndarray:
        calls.append(dataset_id)
        return np.load(data_dir / "datasets" / "ds.npy")

    job_id = queue.submit("ds", PARAMS)["id"]
    queue.cancel(job_id)
    worker = Worker(queue, results, load, device="cpu", lock_dir=data_dir)
    assert worker.run_once(block_ms=100) is None
    assert calls == []
    assert _status(queue, job_id) == "canceled"


def test_cancel_running_job_stops_it_at_the_next_iteration(
    queue: JobQueue, make_worker: Callable[..., Worker], results: ResultStore
) -> None:
    job_id = queue.submit("ds", SLOW)["id"]
    thread = _run_in_thread(make_worker(queue, estimator=SlowerRBFKMeans))
    wait_for(lambda: _running_with_progress(queue, job_id), what="the job to run")
    canceled_at = time.monotonic()
    queue.cancel(job_id)
    thread.join(timeout=15)
    assert not thread.is_alive()
    assert time.monotonic() - canceled_at < 3  # the full fit takes about 4.5 s
    job = queue.get(job_id)
    assert job is not None
    assert (job["status"], job["attempts"]) == ("canceled", 1)
    assert job["finished_at"] is not None
    assert SlowRBFKMeans.fits[-1].interrupted is True  # within a block: nothing fitted
    assert not results.exists(job_id)


def test_fenced_out_worker_drops_its_work_and_the_winner_succeeds_once(
    make_queue: Callable[..., JobQueue],
    make_worker: Callable[..., Worker],
    results: ResultStore,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    queue = make_queue(lease_s=0.3)
    job_id = queue.submit("ds", SLOW)["id"]
    # A stalls: it never renews (as if frozen by GC or a network partition).
    stale = make_worker(
        queue, consumer="stale", timing=Timing(heartbeat_s=1000.0), estimator=SlowRBFKMeans
    )
    thread = _run_in_thread(stale)
    wait_for(lambda: _running_with_progress(queue, job_id), what="the job to run")
    time.sleep(0.4)
    # B, on another machine (its own device lock), reclaims the lapsed lease and finishes.
    winner = make_worker(queue, consumer="winner", lock_dir=tmp_path_factory.mktemp("b"))
    assert winner.run_once(block_ms=200) == job_id
    thread.join(timeout=15)
    assert not thread.is_alive()
    job = queue.get(job_id)
    assert job is not None
    assert (job["status"], job["attempts"]) == ("succeeded", 2)
    meta = committed(queue, job_id)
    assert meta is not None
    assert meta["attempt"] == 2
    assert sorted(p.name for p in results.job_dir(job_id).iterdir()) == ["attempt-2"]
    assert SlowRBFKMeans.fits[0].interrupted is True  # A noticed it was fenced out


class _ReclaimedWhileSaving(ResultStore):
    """Another worker takes the job over right after this one wrote its files."""

    def __init__(self, data_dir: Path, queue: JobQueue) -> None:
        super().__init__(data_dir)
        self.queue = queue
        self.taken_by: list[int] = []

    def save(self, job_id: str, model: Any, X: Any, **kwargs: Any) -> dict[str, Any]:
        meta = super().save(job_id, model, X, **kwargs)
        time.sleep(self.queue.lease_s + 0.1)
        claim = self.queue.claim("other", block_ms=10)
        assert claim is not None
        self.taken_by.append(claim.attempt)
        return meta


def test_worker_fenced_out_at_commit_deletes_only_its_own_files(
    make_queue: Callable[..., JobQueue], data_dir: Path
) -> None:
    queue = make_queue(lease_s=0.2)
    store = _ReclaimedWhileSaving(data_dir, queue)
    winner_files = store.job_dir("j1") / "attempt-2"
    winner_files.mkdir(parents=True)  # the new attempt's result, already written
    queue.submit("ds", PARAMS, job_id="j1")
    worker = Worker(
        queue,
        store,
        dataset_loader(data_dir),
        device="cpu",
        timing=Timing(heartbeat_s=1000),
        lock_dir=data_dir,
    )
    assert worker.run_once(block_ms=200) == "j1"
    assert store.taken_by == [2]
    job = queue.get("j1")
    assert job is not None
    assert (job["status"], job["attempts"]) == ("running", 2)  # the new attempt's, untouched
    assert committed(queue, "j1") is None
    assert sorted(p.name for p in store.job_dir("j1").iterdir()) == ["attempt-2"]


def test_heartbeats_keep_a_long_job_from_being_reclaimed(
    make_queue: Callable[..., JobQueue], make_worker: Callable[..., Worker]
) -> None:
    queue = make_queue(lease_s=0.6)
    params = {**SLOW, "max_iter": 40}
    job_id = queue.submit("ds", params)["id"]
    thread = _run_in_thread(make_worker(queue, estimator=SlowerRBFKMeans))
    wait_for(lambda: _status(queue, job_id) == "running", what="the job to run")
    iterations = set()
    started = time.monotonic()
    while thread.is_alive():
        assert queue.claim("thief", block_ms=20) is None
        job = queue.get(job_id)
        assert job is not None
        iterations.add(job["progress"]["iteration"])
        time.sleep(0.05)
    assert time.monotonic() - started > 2 * queue.lease_s
    job = queue.get(job_id)
    assert job is not None
    assert (job["status"], job["attempts"]) == ("succeeded", 1)
    assert len(iterations - {None}) >= 2  # progress moved while it ran


def test_busy_worker_reaps_a_dead_workers_job(
    make_queue: Callable[..., JobQueue], make_worker: Callable[..., Worker]
) -> None:
    queue = make_queue(lease_s=0.6)
    orphan = queue.submit("ds", PARAMS)["id"]
    assert queue.claim("dies", block_ms=50) is not None  # its worker is gone from here on
    busy = queue.submit("ds", {**SLOW, "max_iter": 60})["id"]
    thread = _run_in_thread(make_worker(queue, estimator=SlowRBFKMeans))
    try:
        wait_for(lambda: _status(queue, busy) == "running", what="the busy job to run")
        wait_for(lambda: _status(queue, orphan) == "queued", 10, "the orphan to be reaped")
        assert _status(queue, busy) == "running"  # reaped while the worker was busy
    finally:
        queue.cancel(busy)
        thread.join(timeout=15)
    job = queue.get(orphan)
    assert job is not None
    assert job["attempts"] == 1


def test_device_lock_allows_one_job_per_device(
    queue: JobQueue, make_worker: Callable[..., Worker], data_dir: Path
) -> None:
    job_id = queue.submit("ds", PARAMS)["id"]
    worker = make_worker(queue)
    unrelated = DeviceLock("cpu", data_dir, scope="another deployment")
    assert unrelated.acquire(0)  # does not block this deployment's workers
    unrelated.release()
    other = DeviceLock("cpu", data_dir, scope=f"{queue.prefix}@{worker.results.root.resolve()}")
    assert other.acquire(0)
    assert worker.run_once(block_ms=200) is None
    assert _status(queue, job_id) == "queued"  # it did not take the job while waiting
    other.release()
    assert worker.run_once(block_ms=200) == job_id


def test_worker_refuses_a_device_it_does_not_have(
    queue: JobQueue, make_worker: Callable[..., Worker]
) -> None:
    for device in ("cuda:99", "tpu", ""):
        with pytest.raises(ValueError, match="not available"):
            make_worker(queue, device=device)
    assert make_worker(queue, device="auto").device in ("cpu", "cuda:0")


def test_unavailable_job_device_falls_back(
    queue: JobQueue, make_worker: Callable[..., Worker], results: ResultStore
) -> None:
    job_id = queue.submit("ds", {**PARAMS, "device": "cuda:99"})["id"]
    make_worker(queue).run_once(block_ms=200)
    assert _status(queue, job_id) == "succeeded"
    assert results.summary(job_id)["device"] == "cpu"  # where it ran, for the client


def test_run_loop_serves_jobs_until_stopped(
    queue: JobQueue, make_worker: Callable[..., Worker]
) -> None:
    worker = make_worker(queue)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), kwargs={"block_ms": 100})
    thread.start()
    try:
        ids = [queue.submit("ds", PARAMS)["id"] for _ in range(2)]
        wait_for(lambda: queue.workers_alive() == 1, what="the worker to register")
        wait_for(lambda: all(_status(queue, i) == "succeeded" for i in ids), what="both jobs")
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert queue.workers_alive() == 0


def test_a_worker_started_while_redis_is_down_waits_for_it(
    data_dir: Path, make_worker: Callable[..., Worker], caplog: pytest.LogCaptureFixture
) -> None:
    """A worker process restarted during an outage of the embedded Redis (both killed by
    the same chaos) used to die on its first command; now it waits, says so once, and
    serves jobs once Redis is back."""
    server = EmbeddedRedis(data_dir / "down", port=free_port())
    client = redis.Redis.from_url(server.url, socket_connect_timeout=0.2)
    worker = make_worker(JobQueue(client, prefix="w"))  # Redis is down: no error
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), kwargs={"block_ms": 100})
    thread.start()
    try:
        wait_for(lambda: "redis lost" in caplog.text, 10, "the worker to notice")
        assert thread.is_alive()
        server.start()
        queue = JobQueue(client, prefix="w")
        job_id = queue.submit("ds", PARAMS)["id"]
        wait_for(lambda: _status(queue, job_id) == "succeeded", 30, "the job")
        assert queue.workers_alive() == 1
    finally:
        stop.set()
        thread.join(timeout=10)
        server.stop()
    assert not thread.is_alive()
    assert caplog.text.count("redis lost") == 1 and "redis back" in caplog.text


def test_stopping_worker_hands_its_job_back(
    queue: JobQueue, make_worker: Callable[..., Worker], results: ResultStore
) -> None:
    job_id = queue.submit("ds", SLOW)["id"]
    worker = make_worker(queue, estimator=SlowRBFKMeans)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), kwargs={"block_ms": 100})
    thread.start()
    wait_for(lambda: _running_with_progress(queue, job_id), what="the job to run")
    stop.set()
    thread.join(timeout=15)
    assert not thread.is_alive()
    job = queue.get(job_id)
    assert job is not None
    assert (job["status"], job["attempts"]) == ("queued", 1)
    assert not results.exists(job_id)
    assert make_worker(queue).run_once(block_ms=200) == job_id
    assert _status(queue, job_id) == "succeeded"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_auto_device_runs_on_the_gpu(
    queue: JobQueue, make_worker: Callable[..., Worker], results: ResultStore, data_dir: Path
) -> None:
    worker = make_worker(queue, device="auto")
    assert worker.device == "cuda:0"
    job_id = queue.submit("ds", PARAMS)["id"]
    assert worker.run_once(block_ms=200) == job_id
    assert _status(queue, job_id) == "succeeded"
    X = np.load(data_dir / "datasets" / "ds.npy")
    direct = RBFKMeans(**PARAMS, device="cpu").fit(X)
    assert results.summary(job_id)["inertia"] == pytest.approx(direct.inertia_, rel=1e-4)
    assert results.summary(job_id)["device"] == "cuda:0"


def _process_settings(redis_server: str, data_dir: Path, **overrides: Any) -> Settings:
    return Settings(
        **{
            "REDIS_URL": redis_server,
            "data_dir": data_dir,
            "key_prefix": "proc",
            "device": "cpu",
            **overrides,
        }
    )


@pytest.mark.slow
def test_sigkilled_worker_process_job_is_reclaimed_and_succeeds_once(
    redis_server: str,
    redis_client: redis.Redis,
    data_dir: Path,
    results: ResultStore,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    settings = _process_settings(redis_server, data_dir, lease_s=1.0)
    queue = JobQueue.from_settings(redis_client, settings)
    job_id = queue.submit("ds", SLOW)["id"]
    (process,) = spawn_workers(settings, 1, estimator=SlowRBFKMeans)
    try:
        wait_for(lambda: _running_with_progress(queue, job_id), 120, "the spawned worker")
        assert process.pid is not None
        os.kill(process.pid, signal.SIGKILL)
        process.join(timeout=10)
        assert process.exitcode == -signal.SIGKILL
    finally:
        if process.is_alive():
            process.kill()
    assert _status(queue, job_id) == "running"  # nobody said otherwise: the lease must lapse
    survivor = Worker(
        queue,
        results,
        dataset_loader(data_dir),
        device="cpu",
        lock_dir=tmp_path_factory.mktemp("survivor"),
    )
    wait_for(lambda: survivor.run_once(block_ms=200) == job_id, 30, "the reclaim")
    job = queue.get(job_id)
    assert job is not None
    assert (job["status"], job["attempts"]) == ("succeeded", 2)
    assert sorted(p.name for p in results.job_dir(job_id).iterdir()) == ["attempt-2"]
    assert survivor.run_once(block_ms=100) is None


@pytest.mark.slow
def test_sigterm_stops_a_worker_process_cleanly(
    redis_server: str, redis_client: redis.Redis, data_dir: Path
) -> None:
    settings = _process_settings(redis_server, data_dir)
    queue = JobQueue.from_settings(redis_client, settings)
    job_id = queue.submit("ds", SLOW)["id"]
    (process,) = spawn_workers(settings, 1, estimator=SlowRBFKMeans)
    try:
        wait_for(lambda: _running_with_progress(queue, job_id), 120, "the spawned worker")
        assert queue.workers_alive() == 1
        process.terminate()
        process.join(timeout=15)
        assert process.exitcode == 0
    finally:
        if process.is_alive():
            process.kill()
    job = queue.get(job_id)
    assert job is not None
    assert (job["status"], job["attempts"]) == ("queued", 1)  # handed back, not lost
    assert queue.workers_alive() == 0


def _spawn_and_die(settings: Settings, pid_file: str) -> None:
    """A server that starts a worker, then dies without cleaning up (as under SIGKILL)."""
    (process,) = spawn_workers(settings, 1)
    Path(pid_file).write_text(str(process.pid))
    time.sleep(60)  # killed by the test long before this


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


@pytest.mark.slow
def test_orphaned_worker_process_exits(
    redis_server: str, redis_client: redis.Redis, data_dir: Path, tmp_path: Path
) -> None:
    settings = _process_settings(redis_server, data_dir)
    queue = JobQueue.from_settings(redis_client, settings)
    pid_file = tmp_path / "worker.pid"
    server = multiprocessing.get_context("spawn").Process(
        target=_spawn_and_die, args=(settings, str(pid_file))
    )
    server.start()
    try:
        wait_for(lambda: queue.workers_alive() == 1, 120, "the worker to start")
        worker_pid = int(pid_file.read_text())
        os.kill(server.pid, signal.SIGKILL)  # no chance to stop its children
        server.join(timeout=10)
        wait_for(lambda: _gone(worker_pid), 30, "the orphaned worker to exit")
    finally:
        if server.is_alive():
            server.kill()
    assert queue.workers_alive() == 0


# ---- time limits and cancel in every phase -----------------------------------------------


@pytest.fixture
def big_data_dir(data_dir: Path) -> Path:
    """A dataset whose fit takes seconds (100 000 points, 8 features, 200 clusters: several
    times the time limits below, however fast the engine's passes get)."""
    rng = np.random.default_rng(1)
    centres = rng.uniform(-10, 10, size=(50, 8))
    X = centres[rng.integers(0, 50, 100_000)] + rng.normal(size=(100_000, 8))
    np.save(data_dir / "datasets" / "big.npy", X.astype(np.float32))
    return data_dir


def test_a_job_past_its_time_limit_fails_at_once_and_is_not_retried(
    queue: JobQueue, make_worker: Callable[..., Worker], results: ResultStore, big_data_dir: Path
) -> None:
    params = {"n_clusters": 200, "random_state": 0, "max_runtime_s": 0.5}
    job_id = queue.submit("big", params)["id"]
    worker = make_worker(queue, max_runtime_s=3600.0, max_runtime_cap_s=7200.0)
    started = time.monotonic()
    assert worker.run_once(block_ms=200) == job_id
    elapsed = time.monotonic() - started
    job = queue.get(job_id)
    assert job is not None
    assert (job["status"], job["attempts"]) == ("failed", 1)
    assert "exceeded its time limit of 0.5 s" in job["error"]
    assert "raise max_runtime_s (this server's cap: 7200 s)" in job["error"]
    assert "reduce n_clusters or n_samples" in job["error"]
    assert job["params"]["max_runtime_s"] == 0.5
    assert queue.dead_letters()[0][0]["job_id"] == job_id  # dead-lettered, not retried
    assert worker.run_once(block_ms=50) is None
    assert not results.exists(job_id)
    assert elapsed < 3.0  # the whole fit takes far longer; stopped within a block


def test_a_job_without_a_stored_limit_runs_under_the_workers_default(
    queue: JobQueue, make_worker: Callable[..., Worker], big_data_dir: Path
) -> None:
    job_id = queue.submit("big", {"n_clusters": 200, "random_state": 0})["id"]
    assert make_worker(queue, max_runtime_s=0.3).run_once(block_ms=200) == job_id
    job = queue.get(job_id)
    assert job is not None
    assert (job["status"], job["attempts"]) == ("failed", 1)
    assert "time limit of 0.3 s" in job["error"]


def test_a_job_within_its_limit_succeeds(
    queue: JobQueue, make_worker: Callable[..., Worker], results: ResultStore
) -> None:
    job_id = queue.submit("ds", {**PARAMS, "max_runtime_s": 600})["id"]
    assert make_worker(queue).run_once(block_ms=200) == job_id
    job = queue.get(job_id)
    assert job is not None and job["status"] == "succeeded"
    assert results.exists(job_id)


def test_a_bad_stored_limit_is_bad_input(
    queue: JobQueue, make_worker: Callable[..., Worker]
) -> None:
    job_id = queue.submit("ds", {**PARAMS, "max_runtime_s": -1})["id"]
    assert make_worker(queue).run_once(block_ms=200) == job_id
    job = queue.get(job_id)
    assert job is not None
    assert (job["status"], job["attempts"]) == ("failed", 1)
    assert "max_runtime_s" in job["error"]


@pytest.mark.parametrize(
    ("module", "name", "params"),
    [
        ("rbfkm_engine.model", "kmeans_plusplus", {"assignment": "hard"}),  # initialisation
        ("rbfkm_engine.solver", "anneal", {}),  # the twin start and annealing
        ("rbfkm_engine.solver", "lloyd", {}),
        ("rbfkm_engine.solver", "search", {}),  # the local search
    ],
)
def test_cancel_is_honoured_in_every_phase(
    module: str,
    name: str,
    params: dict[str, Any],
    queue: JobQueue,
    make_worker: Callable[..., Worker],
    results: ResultStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The job is canceled as the phase begins (and the worker's lease thread has seen it):
    # the phase's first block ends the real fit, and the job ends canceled.
    target = importlib.import_module(module)
    original = getattr(target, name)
    job_id = queue.submit("ds", {**PARAMS, **params})["id"]
    seen: list[str] = []

    def cancel_then_run(*args: Any, **kwargs: Any) -> Any:
        queue.cancel(job_id)
        time.sleep(0.3)  # the lease thread polls the cancel flag every 0.02 s
        try:
            return original(*args, **kwargs)
        except FitInterrupted:
            seen.append("interrupted")
            raise

    monkeypatch.setattr(target, name, cancel_then_run)
    worker = make_worker(queue, timing=Timing(poll_s=0.02))
    assert worker.run_once(block_ms=200) == job_id
    assert seen == ["interrupted"]  # stopped inside the phase, not after it
    job = queue.get(job_id)
    assert job is not None
    assert (job["status"], job["attempts"]) == ("canceled", 1)
    assert not results.exists(job_id)
