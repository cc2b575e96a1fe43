"""examples/deep_clustering.py end to end on the real digits, with tiny epochs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_example_runs_and_scores_every_method() -> None:
    script = REPO / "examples" / "deep_clustering.py"
    args = ["--pretrain-epochs", "3", "--epochs", "2", "--device", "cpu", "--json"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, str(script), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    scores = json.loads(done.stdout.strip().splitlines()[-1])
    assert [s["method"] for s in scores] == [
        "K-Means, raw pixels",
        "autoencoder + K-Means",
        "IDEC (Student-t, DEC loss)",
        "annealed free energy (softmax)",
    ]
    for s in scores:
        assert -1.0 <= s["ari"] <= 1.0 and 0.0 <= s["nmi"] <= 1.0 and s["seconds"] >= 0.0
    # K-Means on the raw digits finds most of their structure (ARI about 0.6): a broken
    # pipeline (labels shuffled, data mangled) scores near 0.
    assert scores[0]["ari"] > 0.4
    assert all(s["nmi"] > 0.2 for s in scores)
