"""Smoke test of benchmarks/distributed.py: it runs on tiny data and prints its table (no
timing is asserted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_distributed_benchmark_prints_a_row_per_process_count() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "distributed.py"), "--procs", "1", "2",
         "--rows", "3000", "--clusters", "8", "--iterations", "3"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.splitlines() if line[:5].strip() in ("1", "2")]
    assert [row[0] for row in rows] == ["1", "2"]
    assert float(rows[1][2]) > 0.0  # two processes spend time in collectives
