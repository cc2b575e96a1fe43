"""benchmarks/fingerprint.py and engine_ab.py: they run, and a fingerprint is repeatable
(else a diff between two versions of the engine would mean nothing)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"

pytest.importorskip("threadpoolctl")


def run(*args: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_fingerprints_are_repeatable() -> None:
    first = run(str(BENCH / "fingerprint.py"), "--quick")
    lines = first.splitlines()
    assert len(lines) == 26
    fields = ("labels", "centres", "history", "inertia", "n_iter", "sigma", "predict", "soft")
    for line in lines:
        name, _, digests = line.partition(": ")
        assert name and all(f"{field}=" in digests for field in fields), line
    assert len({line.split(": ")[0] for line in lines}) == len(lines)  # names are unique
    assert run(str(BENCH / "fingerprint.py"), "--quick") == first


@pytest.mark.slow
def test_engine_ab_against_itself_finds_equal_inertias() -> None:
    out = run(str(BENCH / "engine_ab.py"), str(REPO), str(REPO), "--rounds", "1")
    rows = [line.split() for line in out.splitlines()[1:]]
    assert len(rows) == 6
    for row in rows:
        assert row[-1] == "True", row
        assert re.fullmatch(r"\d+\.\d{3}", row[-2]), row  # the new / old ratio
