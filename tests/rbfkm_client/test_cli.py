"""The client's commands, run as real processes against the live service: `rbfkm fit`,
`rbfkm jobs` (the service's entry point) and `python -m rbfkm_client.cli` (the torch-free
one, the `rbfkm-client` script of the client's distribution)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.rbfkm_client.conftest import KEY, Live, X

RBFKM = shutil.which("rbfkm", path=str(Path(sys.executable).parent))
CLIENT = [sys.executable, "-m", "rbfkm_client.cli"]


def _run(command: list[str], live: Live, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RBFKM_API_KEY": KEY}
    return subprocess.run([*command, *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture
def parquet_file(tmp_path: Path) -> Path:
    path = tmp_path / "points.parquet"
    pq.write_table(pa.table({"x": X[:, 0], "y": X[:, 1]}), path)
    return path


@pytest.mark.skipif(RBFKM is None, reason="the rbfkm script is not installed")
def test_rbfkm_fit_writes_the_labels_as_parquet(
    live: Live, parquet_file: Path, tmp_path: Path
) -> None:
    out, centers = tmp_path / "labels.parquet", tmp_path / "centers.csv"
    done = _run(
        [RBFKM], live, "fit", str(parquet_file), "-k", "3", "--url", live.url,
        "--out", str(out), "--centers", str(centers), "--random-state", "0", "--progress",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "succeeded: 300 points in 3 clusters" in done.stdout
    assert "100%" in done.stderr and "status=succeeded" in done.stderr  # the progress bar
    labels = pq.read_table(out)
    assert labels.column_names == ["row", "label"] and labels.num_rows == 300
    assert len(set(labels["label"].to_pylist())) == 3
    header = centers.read_text().splitlines()[0]
    assert header == "cluster,f0,f1"


@pytest.mark.parametrize("suffix", [".csv", ".npy"])
def test_the_torch_free_entry_point_writes_csv_and_npy(
    live: Live, tmp_path: Path, suffix: str
) -> None:
    data = tmp_path / "points.npy"
    np.save(data, X)
    out = tmp_path / f"labels{suffix}"
    done = _run(CLIENT, live, "fit", str(data), "-k", "3", "--url", live.url, "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "%|" not in done.stderr  # not a terminal: no progress bar
    labels = np.load(out) if suffix == ".npy" else np.loadtxt(out, delimiter=",", skiprows=1)
    assert labels.shape[0] == 300


@pytest.mark.skipif(RBFKM is None, reason="the rbfkm script is not installed")
def test_rbfkm_jobs_list_show_cancel(live: Live, tmp_path: Path) -> None:
    # A fit of minutes, so that it still runs when the cancel comes (after three other
    # commands, each its own process).
    data = tmp_path / "big.npy"
    np.save(data, np.random.default_rng(0).normal(size=(60_000, 16)).astype(np.float32))
    started = _run(
        [RBFKM], live, "fit", str(data), "-k", "2000", "--no-wait", "--url", live.url,
        "--param", "max_iter=10000",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    job_id = started.stdout.strip()
    listed = _run([RBFKM], live, "jobs", "list", "--url", live.url)
    assert job_id in listed.stdout
    shown = _run([RBFKM], live, "jobs", "show", job_id, "--url", live.url)
    assert json.loads(shown.stdout)["id"] == job_id
    canceled = _run([RBFKM], live, "jobs", "cancel", job_id, "--url", live.url)
    assert canceled.returncode == 0 and canceled.stdout.startswith(f"job {job_id}: ")


def test_errors_are_one_line_with_the_problem_detail(live: Live, tmp_path: Path) -> None:
    data = tmp_path / "few.npy"
    np.save(data, X[:5])
    done = _run(CLIENT, live, "fit", str(data), "-k", "9", "--url", live.url)
    assert done.returncode == 1
    assert done.stderr.startswith("rbfkm-client: error: 422") and "n_clusters (9)" in done.stderr
    missing = _run(CLIENT, live, "jobs", "show", "nope", "--url", live.url)
    assert missing.returncode == 1 and "404" in missing.stderr


def test_an_unknown_output_format_is_a_usage_error(live: Live) -> None:
    done = _run(CLIENT, live, "fit", "x.npy", "-k", "2", "--out", "labels.xlsx")
    assert done.returncode == 2 and ".parquet, .csv, .npy" in done.stderr


def test_a_reader_that_went_away_is_not_an_error(live: Live) -> None:
    """`rbfkm-client jobs list | head -1`: the reader closes the pipe; no traceback, exit 0."""
    from rbfkm_client import Client

    with Client(live.url, KEY) as client:
        client.fit(X, 3, wait=False)  # one job at least, so there is a line to write
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line is written
    try:
        done = subprocess.run(
            [*CLIENT, "jobs", "list", "--url", live.url],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "RBFKM_API_KEY": KEY},
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in done.stderr and "Error" not in done.stderr, done.stderr
    assert done.returncode == 0
