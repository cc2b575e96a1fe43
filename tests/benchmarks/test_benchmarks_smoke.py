"""Smoke test of the benchmark scripts: they run on tiny data and print their tables.

No timing is asserted: these only check that the comparison runs end to end and reports
the table, the ratios and the target lines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"

pytest.importorskip("faiss", reason="faiss-cpu is a benchmark peer (the 'bench' extra)")
pytest.importorskip("fast_pytorch_kmeans", reason="fast-pytorch-kmeans is a benchmark peer")
pytest.importorskip("threadpoolctl")
pytest.importorskip("psutil")


def _run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


@pytest.mark.slow
def test_compare_quick_prints_tables_and_ratios(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = _run(
        [
            str(BENCH / "compare.py"),
            "--quick",
            "--threads",
            "1",
            "--only",
            "hard",
            "--seeds",
            "1",
            "--memory",
            "engine",
            "--json",
            str(out),
        ]
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = proc.stdout
    for needle in (
        "-- speed",
        "ms/iter",
        "GFLOP/s",
        "peak MiB",
        "-- quality",
        "mean inertia",
        "-- ratios engine / peer",
        "vs faiss",
        "vs sklearn-n10",
        "=== targets",
        "torch.matmul",
    ):
        assert needle in text, f"{needle!r} missing from the output:\n{text}"
    verdicts = text.split("=== targets", 1)[1].splitlines()
    for target in ("(a)", "(b)", "(c)", "(d)"):
        line = next(ln for ln in verdicts if ln.split()[1:2] == [target])
        assert line.split()[0] in {"PASS", "FAIL", "N/A"}, line
    report = json.loads(out.read_text())
    (res,) = report["datasets"].values()
    assert {"rbfkm-hard", "faiss", "fpk", "sklearn-n1"} <= set(res["speed"])
    assert set(res["quality"]) >= {"rbfkm-entmax15", "sklearn-n10"}
    assert res["memory"]["rbfkm-hard"]["peak_total"] > 0
    assert res["ratios"]["rbfkm-hard"]["faiss"]["t_iter"] > 0


@pytest.mark.slow
def test_compare_quick_on_a_real_set_prints_per_seed_wins_and_load(tmp_path: Path) -> None:
    pytest.importorskip("PIL", reason="the photographs are decoded by pillow (the 'bench' extra)")
    out = tmp_path / "bench.json"
    args = ["--quick", "--threads", "1", "--only", "colours", "--seeds", "2", "--memory", "none"]
    proc = _run([str(BENCH / "compare.py"), *args, "--json", str(out)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = proc.stdout
    for needle in ("=== colours-china-4000x3-k8", "load average (1 min)", "-- per seed vs"):
        assert needle in text, f"{needle!r} missing from the output:\n{text}"
    for method in ("rbfkm-hard", "rbfkm-softmax", "rbfkm-entmax15"):
        assert f"   {method}: wins " in text and " of 2 seeds, worst ratio " in text
    report = json.loads(out.read_text())
    (res,) = report["datasets"].values()
    assert len(res["quality_load"]["start"]) == 3 and len(res["quality_load"]["end"]) == 3
    per_seed = res["per_seed"]["rbfkm-entmax15"]
    assert [r["seed"] for r in per_seed["rows"]] == [0, 1]
    assert per_seed["summary"]["seeds"] == 2
    assert all(r["inertia_ratio"] > 0 and r["wall_ratio"] > 0 for r in per_seed["rows"])
    # The annealing's fixed point is at or above the end the search reached; hard fits have none.
    assert "annealed/end" in text
    assert res["quality"]["rbfkm-entmax15"]["annealed_ratio_mean"] >= 1.0 - 1e-6
    assert res["quality"]["rbfkm-hard"]["annealed_ratio_mean"] is None


def test_evaluate_centroids_is_the_float64_nearest_centroid_inertia() -> None:
    import numpy as np

    sys.path.insert(0, str(BENCH))
    import common

    X = np.array([[0.0, 0.0], [1.0, 0.0], [10.0, 0.0]], dtype=np.float32)
    C = np.array([[0.5, 0.0], [10.0, 0.0], [np.nan, 0.0]])
    ev = common.evaluate_centroids(X, C, np.array([0, 0, 1]))
    assert ev["inertia"] == pytest.approx(0.5)
    assert ev["n_empty"] == 1
    assert ev["ari"] == pytest.approx(1.0)


def test_annealed_inertia_is_the_lloyd_finish_after_the_temperatures() -> None:
    sys.path.insert(0, str(BENCH))
    import common

    def record(sigma: float, inertia: float) -> dict[str, float]:
        return {"sigma": sigma, "inertia": inertia}

    annealed = [record(2.0, 9.0), record(1.0, 7.0), record(0.0, 5.0), record(0.0, 4.0)]
    assert common.annealed_inertia(annealed) == 5.0  # not the search's kept move after it
    assert common.annealed_inertia([record(0.0, 5.0), record(0.0, 4.0)]) is None  # hard
    assert common.annealed_inertia([record(2.0, 9.0)]) is None  # stopped while annealing


def test_in_fit_gemm_counts_every_lloyd_pass_of_padded_blocks() -> None:
    import numpy as np

    sys.path.insert(0, str(BENCH))
    import common

    rng = np.random.default_rng(0)
    # Enough rows for a block per thread: on several threads the fit's passes would run
    # where the profiler does not look, so it is profiled on one.
    # 40 features: more than the fused kernel computes itself (its passes' distances then
    # come from a GEMM, as torch's do).
    X = rng.normal(size=(20_000, 40)).astype(np.float32)
    C0 = X[:5].copy()  # k = 5: the Lloyd passes use blocks padded to 16 columns
    out = common.in_fit_gemm(X, C0, n_iter=6, repeats=1)
    # Every pass of the fit is one (rows, 40) x (40, 5) GEMM per block, into the padded
    # block's first 5 columns: at least the 6 Lloyd iterations' worth of rows are seen.
    assert out["rows"] >= 6 * X.shape[0]
    assert out["gflops"] > 0 and out["matmul_gflops"] > 0 and out["threads"] == 1


def test_gpu_compare_skips_cleanly_without_cuda() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the GPU check script covers this")
    proc = _run([str(BENCH / "gpu_compare.py"), "--quick"], timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "skipped" in proc.stdout


@pytest.mark.slow
def test_oversubscription_quick_prints_both_slowdowns() -> None:
    args = ["--quick", "--rounds", "1", "--threads", "1", "--hogs", "1"]
    proc = _run([str(BENCH / "oversubscription.py"), *args, "--only", "rbfkm-hard,sklearn"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = proc.stdout
    for needle in ("quiet s", "loaded s", "slowdown", "rbfkm-hard", "sklearn"):
        assert needle in text, f"{needle!r} missing from the output:\n{text}"
    verdict = next(line for line in text.splitlines() if line.startswith("hard-2000x4-k5 rbfkm"))
    assert "scikit-learn's" in verdict and ("within" in verdict or "WORSE" in verdict)
