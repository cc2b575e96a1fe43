"""The README's client example, run verbatim against the live service."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import marked_block
from tests.rbfkm_client.conftest import KEY, Live

README = Path(__file__).resolve().parents[2] / "README.md"


def _example() -> str:
    return marked_block(README, "client-example", "python")


def test_the_example_is_at_most_six_lines() -> None:
    lines = [line for line in _example().splitlines() if line.strip()]
    assert len(lines) <= 6, lines


def test_the_example_runs_as_written(live: Live) -> None:
    env = {**os.environ, "RBFKM_URL": live.url, "RBFKM_API_KEY": KEY}
    done = subprocess.run(
        [sys.executable, "-c", _example()], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    status, labels = done.stdout.strip().split(" ", 1)
    assert status == "succeeded"
    assert sorted(int(label) for label in labels.strip("[]").split()) == [0, 1, 2]
