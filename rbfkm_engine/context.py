"""The state every phase of one run shares (:class:`FitContext`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .kpath import PathRecorder
from .passes import Workspace
from .progress import Budget


@dataclass
class FitContext:
    """One run of a fit, as the phases see it.

    ``passes`` holds the data (``X``, weights, squared norms) in the fit's frame (scaled
    and centred by :mod:`~rbfkm_engine.frame`; the phases never see the data's own units)
    and makes the blocked passes over it. ``tol`` is absolute: the sum over centres of the
    squared centre shift at which an iteration counts as converged. ``path`` notes the
    counts of centres a grown fit passes through (:mod:`~rbfkm_engine.kpath`).
    """

    passes: Workspace
    budget: Budget
    tol: float
    generator: torch.Generator | None = None
    history: list[dict[str, float]] = field(default_factory=list)
    verbose: bool = False
    #: Notes the counts of centres annealing passes through (the k path).
    path: PathRecorder | None = None

    def say(self, template: str, *args: object) -> None:
        """Print ``template.format(*args)`` when the fit is verbose (formatted only then:
        the phases report every temperature and every trial)."""
        if self.verbose:
            print(template.format(*args))
