"""The state a run's phases share."""

from __future__ import annotations

import pytest
import torch

from rbfkm_engine.context import FitContext
from rbfkm_engine.passes import Workspace
from rbfkm_engine.progress import Budget


def context(verbose: bool) -> FitContext:
    X = torch.zeros((4, 2), dtype=torch.float64)
    return FitContext(Workspace(X, None, 2, 4), Budget(10), 1e-6, verbose=verbose)


def test_say_prints_only_when_verbose(capsys: pytest.CaptureFixture[str]) -> None:
    context(False).say("quiet")
    context(True).say("sigma=1 iters=2")
    assert capsys.readouterr().out == "sigma=1 iters=2\n"


def test_each_run_has_its_own_history() -> None:
    first, second = context(False), context(False)
    first.history.append({"sigma": 0.0})
    assert second.history == [] and first.generator is None
