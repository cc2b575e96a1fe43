"""`rbfkm serve | api | worker` as real processes, and the README's curl session."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest
import redis
import torch
from sklearn.metrics import adjusted_rand_score

from rbfkm_engine import RBFKMeans
from service.cli import build_parser, main, settings_from
from service.embedded import free_port
from service.settings import Settings
from tests.conftest import marked_block
from tests.service.conftest import npy_bytes, wait_for

ROOT = Path(__file__).resolve().parents[2]
SERVICE_DOC = ROOT / "README.md"
TERMINAL = ("succeeded", "failed", "canceled")


def clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment without any rbfkm or Redis settings, plus `extra`.

    TMPDIR is private: workers lock their device with a file in the temp directory, and
    other test runs on this machine must not hold it.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RBFKM_", "REDIS_URL"))}
    env["TMPDIR"] = str(tmp)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "service.cli", *args],
            cwd=log.parent,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def wait_ready(base_url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exited with {proc.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"{base_url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"not ready after {timeout_s}s:\n{log.read_text()}")


def stop(proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 40) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"did not stop on SIGTERM:\n{log.read_text()}") from None


def run_tiny_job(base_url: str) -> dict:
    data = {"data": [[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.1, 5.0]]}
    with httpx.Client(base_url=base_url, timeout=30) as http:
        dataset = http.post("/v1/datasets", json=data).json()
        job = http.post("/v1/jobs", json={"dataset_id": dataset["id"], "n_clusters": 2})
        assert job.status_code == 202, job.text
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status = http.get(f"/v1/jobs/{job.json()['id']}").json()["status"]
            if status not in ("queued", "running"):
                break
            time.sleep(0.1)
        assert status == "succeeded", http.get(f"/v1/jobs/{job.json()['id']}").json()
        return http.get(f"/v1/jobs/{job.json()['id']}/result").json()


def curl_session() -> str:
    return marked_block(SERVICE_DOC, "curl-session", "bash")


# ---- argument handling -------------------------------------------------------------------


def test_options_override_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RBFKM_PORT", "9001")
    monkeypatch.setenv("RBFKM_WORKERS", "3")
    args = build_parser().parse_args(
        ["serve", "--port", "9002", "--data-dir", str(tmp_path), "--redis-url", "redis://h:1/0"]
    )
    settings = settings_from(args)
    assert (settings.port, settings.workers) == (9002, 3)
    assert settings.data_dir == tmp_path and settings.redis_url == "redis://h:1/0"
    assert settings_from(build_parser().parse_args(["api"])).port == 9001


def test_version_and_required_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and "rbfkm" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2


@pytest.mark.parametrize("command", ["api", "worker"])
def test_halves_need_redis_url(monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    for name in ("REDIS_URL", "RBFKM_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(ROOT / "tests")  # no .env here
    with pytest.raises(SystemExit) as info:
        main([command])
    assert "REDIS_URL is not set" in str(info.value.code)


# ---- real processes ----------------------------------------------------------------------


@pytest.fixture
def served(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    """`rbfkm serve` with the embedded Redis and one worker: on the CPU, or on the device
    an indirect parametrization names (``RBFKM_DEVICE``)."""
    port = free_port()
    log = tmp_path / "serve.log"
    device = getattr(request, "param", "cpu")
    env = clean_env(
        tmp_path, RBFKM_WORKERS="1", RBFKM_DEVICE=device, RBFKM_DATA_DIR=str(tmp_path / "d")
    )
    proc = start(["serve", "--port", str(port)], log, env)
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base_url, proc, log, timeout_s=120)
        yield base_url, proc, log
    finally:
        if proc.poll() is None:
            server = redis_server_of(proc)  # a killed serve would leave its Redis running
            proc.kill()
            proc.wait()
            if server is not None:
                server.kill()


#: `served`'s RBFKM_DEVICE, and the device its worker reports in a result.
ON_EACH_DEVICE = pytest.mark.parametrize(
    ("served", "device"),
    [
        pytest.param("cpu", "cpu", id="cpu"),
        pytest.param(
            "cuda",
            "cuda:0",
            id="cuda",
            marks=[
                pytest.mark.gpu,
                pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
            ],
        ),
    ],
    indirect=["served"],
)


def four_blobs(n: int = 4000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Four blobs far apart in 3-D (any fit finds them exactly), and their true labels."""
    centres = np.array([[-8.0, -8.0, 0.0], [8.0, -8.0, 0.0], [-8.0, 8.0, 0.0], [8.0, 8.0, 8.0]])
    truth = np.arange(n) % len(centres)
    points = centres[truth] + np.random.default_rng(seed).normal(scale=0.6, size=(n, 3))
    return points, truth


def log_tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def fit_and_predict_blobs(base_url: str, log: Path, device: str) -> None:
    """A soft and a hard job on a few thousand points run on the worker's `device` (their
    results say so), find the blobs as a CPU fit does, and predict gives the job's labels."""
    X, truth = four_blobs()
    npy = {"Content-Type": "application/x-npy"}
    rows = np.arange(0, len(X), 97)
    with httpx.Client(base_url=base_url, timeout=30) as http:
        dataset = http.post("/v1/datasets", content=npy_bytes(X), headers=npy)
        assert dataset.status_code == 201, dataset.text
        jobs = {}
        for assignment in ("entmax15", "hard"):
            body = {"n_clusters": 4, "assignment": assignment, "random_state": 0}
            job = http.post("/v1/jobs", json={"dataset_id": dataset.json()["id"], **body})
            assert job.status_code == 202, job.text
            jobs[assignment] = job.json()["id"]
        for assignment, job_id in jobs.items():
            deadline = time.monotonic() + 60
            while (job := http.get(f"/v1/jobs/{job_id}").json())["status"] not in TERMINAL:
                assert time.monotonic() < deadline, f"{assignment}: {job}\n{log_tail(log)}"
                time.sleep(0.1)
            assert job["status"] == "succeeded", f"{assignment}: {job}\n{log_tail(log)}"
            result = http.get(f"/v1/jobs/{job_id}/result?exclude=history").json()
            assert result["device"] == device, (assignment, result["device"])
            labels, centroids = np.array(result["labels"]), np.array(result["centroids"])
            assert labels.shape == (len(X),) and centroids.shape == (4, 3), assignment
            assert adjusted_rand_score(truth, labels) > 0.99, assignment
            local = RBFKMeans(n_clusters=4, assignment=assignment, random_state=0, device="cpu")
            inertia = local.fit(X).inertia_
            assert result["inertia"] == pytest.approx(inertia, rel=1e-3), assignment
            predicted = http.post(
                f"/v1/jobs/{job_id}/predict", content=npy_bytes(X[rows]), headers=npy
            )
            assert predicted.status_code == 200, predicted.text
            assert predicted.json()["labels"] == labels[rows].tolist(), assignment


@ON_EACH_DEVICE
def test_serve_runs_everything_and_shuts_down_cleanly(
    served: tuple[str, subprocess.Popen[bytes], Path], device: str, tmp_path: Path
) -> None:
    """The tiny job, the README's session and real fits on the worker's device (on a GPU
    machine too, with RBFKM_DEVICE=cuda); then SIGTERM stops everything."""
    base_url, proc, log = served
    output = log.read_text()
    assert f"rbfkm API on {base_url}" in output
    redis_url = re.search(r"embedded Redis on (redis://\S+)", output).group(1)  # type: ignore[union-attr]
    result = run_tiny_job(base_url)
    assert sorted(map(tuple, result["centroids"]))[0][0] == pytest.approx(0.05, abs=1e-3)
    if shutil.which("curl") and shutil.which("jq"):
        session = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", curl_session()],
            cwd=tmp_path,
            env={**os.environ, "BASE": base_url},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert session.returncode == 0, session.stdout + session.stderr
        assert '"labels":[' in session.stdout and "succeeded" in session.stdout
    fit_and_predict_blobs(base_url, log, device)
    assert f"started on {device}" in log.read_text(), log_tail(log)
    assert stop(proc, log) == 0, log.read_text()
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(redis_url, socket_connect_timeout=1).ping()
    assert (tmp_path / "d" / "redis").is_dir()


def redis_server_of(serve: subprocess.Popen[bytes], other_than: int = 0) -> psutil.Process | None:
    """The running embedded redis-server of an `rbfkm serve` (a child of it), if any."""
    for child in psutil.Process(serve.pid).children():
        with contextlib.suppress(psutil.NoSuchProcess):
            if (
                "redis-server" in child.name()
                and child.pid != other_than
                and child.status() != psutil.STATUS_ZOMBIE
            ):
                return child
    return None


@pytest.mark.slow
def test_a_killed_embedded_redis_comes_back_by_itself(
    served: tuple[str, subprocess.Popen[bytes], Path],
) -> None:
    """kill -9 of the embedded Redis, twice: `serve` restarts it (backing off the second
    time) on its port with its AOF, the API is ready again and the data are still there,
    without anyone doing anything; and the worker's log says so in a few lines."""
    base_url, proc, log = served
    http = httpx.Client(base_url=base_url, timeout=30)
    tiny = http.post("/v1/datasets", json={"data": [[0, 0], [0.1, 0], [5, 5], [5.1, 5]]}).json()
    # A long job (very slow cooling), so that the worker's lease thread, which polls Redis
    # every 0.1 s, runs through the outage; it used to log a warning at every poll.
    points = np.random.default_rng(0).normal(size=(5000, 2)).round(4).tolist()
    slow = http.post("/v1/datasets", json={"data": points}).json()
    body = {"dataset_id": slow["id"], "n_clusters": 16, "cooling": 0.999, "max_iter": 100000}
    long_job = http.post("/v1/jobs", json=body).json()
    wait_for(
        lambda: http.get(f"/v1/jobs/{long_job['id']}").json()["status"] == "running",
        60,
        "the long job to run",
    )
    first = redis_server_of(proc)
    assert first is not None and f"pid {first.pid}," in log.read_text()
    mark = len(log.read_text().splitlines())
    killed = time.monotonic()
    first.kill()
    second = wait_for(lambda: redis_server_of(proc, first.pid), 30, "a restarted redis-server")
    second.kill()  # dies right after its restart: the next restart waits longer

    def ready() -> bool:
        try:
            return httpx.get(f"{base_url}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(lambda: redis_server_of(proc, second.pid) and ready(), 30, "/readyz back to 200")
    third = redis_server_of(proc, second.pid)
    assert third is not None
    recovered_s = time.monotonic() - killed
    listed = {item["id"] for item in http.get("/v1/datasets").json()["items"]}
    assert {tiny["id"], slow["id"]} <= listed, "datasets' metadata came back with the AOF"
    assert http.get(f"/v1/jobs/{long_job['id']}").json()["status"] in ("running", "succeeded")
    assert http.post(f"/v1/jobs/{long_job['id']}/cancel").status_code in (200, 202, 409)
    job = http.post("/v1/jobs", json={"dataset_id": tiny["id"], "n_clusters": 2})
    assert job.status_code == 202, job.text
    status = wait_for(
        lambda: (
            http.get(f"/v1/jobs/{job.json()['id']}").json()["status"] in TERMINAL
            and http.get(f"/v1/jobs/{job.json()['id']}").json()["status"]
        ),
        60,
        "the job submitted after the restart",
    )
    assert status == "succeeded"
    http.close()
    lines = log.read_text().splitlines()[mark:]
    # The second death shows as an exit or, killed while it loaded, as a failed restart.
    restarts = [line for line in lines if "restarting it on the same port" in line]
    assert len(restarts) == 2 and "exited with code -9" in restarts[0], lines
    waits = [float(m.group(1)) if (m := re.search(r" in (\d+) s$", line)) else 0.0
             for line in restarts]  # fmt: skip
    assert waits[1] > waits[0], f"the second, quick death backs off longer: {restarts}"
    assert recovered_s < 30
    worker = [line for line in lines if "service.worker" in line and "WARNING" in line]
    assert any("redis lost" in line for line in worker), lines
    assert any("redis back" in line for line in worker), lines
    assert len(worker) <= 6, "\n".join(worker)  # was a line every 0.1 s, all outage long
    assert stop(proc, log) == 0, log.read_text()  # and it still shuts down cleanly
    assert not third.is_running() or third.status() == psutil.STATUS_ZOMBIE


def test_api_and_worker_as_separate_processes(redis_client: redis.Redis, redis_server: str,
                                              tmp_path: Path) -> None:  # fmt: skip
    port = free_port()
    env = clean_env(tmp_path, REDIS_URL=redis_server, RBFKM_DATA_DIR=str(tmp_path / "shared"),
                    RBFKM_DEVICE="cpu")  # fmt: skip
    api_log, worker_log = tmp_path / "api.log", tmp_path / "worker.log"
    api = start(["api", "--port", str(port)], api_log, env)
    worker = start(["worker"], worker_log, env)
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base_url, api, api_log, timeout_s=120)
        assert run_tiny_job(base_url)["n_iter"] >= 1
    finally:
        assert stop(worker, worker_log) == 0, worker_log.read_text()
        assert stop(api, api_log) == 0, api_log.read_text()
    assert Settings(REDIS_URL=redis_server).redis_url == redis_server


def test_every_setting_is_documented() -> None:
    text = (ROOT / "docs" / "service.md").read_text()
    for name, field in Settings.model_fields.items():
        variable = "REDIS_URL" if name == "redis_url" else f"RBFKM_{name.upper()}"
        assert f"| `{variable}`" in text, f"{variable} ({field.description}) is not in the table"


def test_fit_distributed_runs_the_engines_batch_fit(tmp_path: Path, capsys) -> None:
    X = np.random.default_rng(0).normal(size=(120, 3))
    np.save(tmp_path / "a.npy", X[:50])
    np.save(tmp_path / "b.npy", X[50:])
    out = tmp_path / "out"
    flags = ["--n-clusters", "3", "--device", "cpu", "--dtype", "float64"]
    assert main(["fit-distributed", str(tmp_path / "*.npy"), str(out), *flags]) == 0
    alone = RBFKMeans(n_clusters=3, device="cpu", dtype="float64", random_state=0).fit(X)
    np.testing.assert_allclose(np.load(out / "centroids.npy"), alone.cluster_centers_)
    assert main(["fit-distributed", str(tmp_path / "*.csv"), str(out), *flags]) == 2
    assert "rbfkm fit-distributed: no shard files match" in capsys.readouterr().err
