"""The batch CLI: shard files in, centroids and per-file labels out, under torchrun."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.datasets import make_blobs

from rbfkm_engine import RBFKMeans
from rbfkm_engine.distributed import main
from rbfkm_engine.shards import files_of_rank

BOUNDS = [0, 90, 400, 430, 700]  # four uneven shards
PARAMS = {"n_clusters": 5, "assignment": "entmax15", "dtype": "float64", "random_state": 7}


def _data() -> np.ndarray:
    return make_blobs(n_samples=BOUNDS[-1], centers=5, n_features=3, random_state=2)[0]


def _write_npy(folder: Path) -> list[Path]:
    X = _data()
    paths = []
    for i in range(len(BOUNDS) - 1):
        paths.append(folder / f"part-{i}.npy")
        np.save(paths[-1], X[BOUNDS[i] : BOUNDS[i + 1]])
    return paths


def _flags() -> list[str]:
    return [
        "--n-clusters", str(PARAMS["n_clusters"]),
        "--assignment", PARAMS["assignment"],
        "--dtype", PARAMS["dtype"],
        "--random-state", str(PARAMS["random_state"]),
        "--device", "cpu",
    ]  # fmt: skip


def test_files_go_to_ranks_in_contiguous_runs() -> None:
    files = [Path(f"{i}") for i in range(5)]
    runs = [files_of_rank(files, rank, 2) for rank in range(2)]
    assert runs == [files[:2], files[2:]]
    assert files_of_rank(files[:1], 0, 2) == [] and files_of_rank(files[:1], 1, 2) == files[:1]


@pytest.mark.slow
def test_four_shards_on_two_processes_under_torchrun(tmp_path: Path) -> None:
    _write_npy(tmp_path)
    out = tmp_path / "out"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        "-m", "rbfkm_engine.distributed", str(tmp_path / "part-*.npy"), str(out), *_flags(),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    single = RBFKMeans(**PARAMS, device="cpu").fit(_data())
    np.testing.assert_allclose(np.load(out / "centroids.npy"), single.cluster_centers_, atol=1e-6)
    labels = np.concatenate([np.load(out / "labels" / f"part-{i}.labels.npy") for i in range(4)])
    np.testing.assert_array_equal(labels, single.labels_)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["n_samples"] == BOUNDS[-1]
    assert summary["inertia"] == pytest.approx(single.inertia_, rel=1e-9)


def test_parquet_shards_in_and_out_in_one_process(tmp_path: Path) -> None:
    for path in _write_npy(tmp_path):
        X = np.load(path)
        table = {f"f{j}": X[:, j] for j in range(X.shape[1])}
        pq.write_table(pa.table(table), path.with_suffix(".parquet"))
    out = tmp_path / "out"
    assert main([str(tmp_path / "*.parquet"), str(out), *_flags(), "--format", "parquet"]) == 0
    single = RBFKMeans(**PARAMS, device="cpu").fit(_data())
    centres = pq.read_table(out / "centroids.parquet").to_pandas().to_numpy()
    np.testing.assert_allclose(centres, single.cluster_centers_, atol=1e-9)
    labels = [pq.read_table(out / "labels" / f"part-{i}.labels.parquet") for i in range(4)]
    assert [t.column_names for t in labels] == [["label"]] * 4
    got = np.concatenate([t.column("label").to_numpy() for t in labels])
    np.testing.assert_array_equal(got, single.labels_)


def test_no_matching_files_is_a_clear_error(tmp_path: Path, capsys) -> None:
    assert main([str(tmp_path / "*.npy"), str(tmp_path / "out"), "--n-clusters", "2"]) == 2
    assert "no shard files match" in capsys.readouterr().err
