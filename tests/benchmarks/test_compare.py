"""benchmarks/compare.py's pieces that need no peer: per-seed wins, the choice of sets,
and the one-line skip of a real set whose package is absent."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"
sys.path.insert(0, str(BENCH))

import common  # noqa: E402
import compare  # noqa: E402
import realdata  # noqa: E402


def runs(inertias: list[float], walls: list[float], seeds: list[int] | None = None) -> list:
    seeds = seeds if seeds is not None else list(range(len(inertias)))
    return [
        {"seed": s, "inertia": i, "wall_s": w}
        for s, i, w in zip(seeds, inertias, walls, strict=True)
    ]


def test_per_seed_wins_compares_each_seed_with_the_same_seed() -> None:
    # seed 0: better and 4x faster; seed 1: worse by 5e-7 (within the 1e-6 slack) but
    # slower; seed 2: 1% worse; seed 3 exists only in the reference and is left out.
    mine = runs([99.0, 100.00005, 101.0], [1.0, 3.0, 2.0])
    ref = runs([100.0, 100.0, 100.0, 50.0], [4.0, 4.0, 4.0, 4.0])
    out = compare.per_seed_wins(mine, list(reversed(ref)), rtol=1e-6)
    rows = out["rows"]
    assert [r["seed"] for r in rows] == [0, 1, 2]
    assert [r["win"] for r in rows] == [True, True, False]
    assert [r["win_in_time"] for r in rows] == [True, False, False]
    assert rows[0]["inertia_ratio"] == pytest.approx(0.99)
    assert [r["wall_ratio"] for r in rows] == pytest.approx([0.25, 0.75, 0.5])
    assert out["summary"] == {
        "seeds": 3,
        "wins": 2,
        "wins_in_time": 1,
        "worst_ratio": pytest.approx(1.01),
        "median_wall_ratio": pytest.approx(0.5),
    }
    line = compare.summary_line(out["summary"])
    assert line.startswith("wins 2 of 3 seeds, worst ratio 1.010000, median wall ratio 0.50")


def test_per_seed_wins_with_an_exact_reference_and_no_common_seed() -> None:
    out = compare.per_seed_wins(runs([0.0, 1.0], [1.0, 1.0]), runs([0.0, 0.0], [2.0, 0.0]))
    assert [r["win"] for r in out["rows"]] == [True, False]
    assert out["rows"][1]["inertia_ratio"] == math.inf
    assert out["rows"][1]["wall_ratio"] == math.inf
    empty = compare.per_seed_wins(runs([1.0], [1.0], [5]), runs([1.0], [1.0], [6]))
    assert empty["summary"]["seeds"] == 0 and empty["summary"]["worst_ratio"] is None
    assert "wins 0 of 0 seeds, worst ratio -, median wall ratio -" in compare.summary_line(
        empty["summary"]
    )


def test_per_seed_part_covers_the_engine_methods_against_sklearn_n10() -> None:
    quality = {m: {"runs": runs([1.0], [1.0])} for m in ("rbfkm-hard", "sklearn-n1", "sklearn-n10")}
    assert set(compare.per_seed_part(common, quality)) == {"rbfkm-hard"}
    del quality["sklearn-n10"]
    assert compare.per_seed_part(common, quality) == {}


def test_sets_and_only_pick_the_data_sets() -> None:
    def keys(*argv: str) -> list[str]:
        return compare.select(compare.parse_args(list(argv)), common)[0]

    assert keys() == ["blobs100k", "blobs200k", "digits", "hard"]
    assert keys("--sets", "real") == list(realdata.KEYS)
    assert keys("--sets", "synthetic") == ["blobs100k", "blobs200k", "hard"]
    assert set(keys("--sets", "all")) == set(compare.SYNTHETIC_SETS) | set(realdata.KEYS)
    assert keys("--sets", "real", "--only", "hard,rbfkm-hard") == ["hard"]
    with pytest.raises(SystemExit):
        keys("--only", "no-such-set")


def test_compare_skips_a_set_whose_package_is_absent(tmp_path: Path) -> None:
    pytest.importorskip("threadpoolctl")
    blocker = tmp_path / "PIL"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('blocked by the test')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    args = ["--quick", "--only", "colours,digits,rbfkm-hard", "--no-quality", "--memory", "none"]
    proc = subprocess.run(
        [sys.executable, str(BENCH / "compare.py"), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("skipped")]
    assert line == "skipped colours: needs pillow (the 'bench' extra)"
    assert "=== digits-1797x64-k10" in proc.stdout


def test_write_report_replaces_the_file_whole(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    out.write_text("old")
    compare.write_report(out, {"datasets": {"x": {"inertia": np.float64(1.5)}}})
    assert json.loads(out.read_text()) == {"datasets": {"x": {"inertia": 1.5}}}
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"]
