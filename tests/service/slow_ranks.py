"""An estimator for the ranks of a parallel job that a test acts on mid-fit.

In a module of its own, light to import: every rank process of a parallel job unpickles
the worker's estimator, so imports this module (not a test module with its fixtures).
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from rbfkm_engine import RBFKMeans


class SlowRBFKMeans(RBFKMeans):
    """The real estimator in float64, slowed down per iteration (on rank 0, which the
    other ranks keep pace with) so that a test can act mid-fit."""

    delay_s: ClassVar[float] = 0.05

    def __init__(self, **params: Any) -> None:
        super().__init__(**{**params, "dtype": "float64"})

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None, **kwargs: Any) -> Any:
        callback = kwargs.pop("callback", None)

        def slow(progress: Any) -> Any:
            time.sleep(self.delay_s)
            return callback(progress) if callback is not None else None

        return super().fit(X, y, sample_weight, callback=slow, **kwargs)
