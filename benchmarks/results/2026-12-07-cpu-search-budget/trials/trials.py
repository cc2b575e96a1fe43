"""Every local-search trial's Lloyd inertias, with abandonment off: a scratch script kept
with its logs (run at c8f6674, ``max_iter=3000`` so that the budget never cuts a trial).

    python trials.py uniform 0      # or a compare.py set key: colours, patches, iris12, ...

writes ``trials-<set>-<seed>.json``: the fit's inertia and, per trial, the level it had to
end below, its inertias after each iteration but the converged one, and whether it
converged. ``judge.py`` then asks which trials an abandonment rule would have cut.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

import rbfkm_engine.lloyd as lloyd_module
import rbfkm_engine.local_search as search
from rbfkm_engine import RBFKMeans

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # benchmarks/
LOG: list[dict] = []
_lloyd = lloyd_module.lloyd


def logged_lloyd(ctx, C, *, phase="lloyd", abandon_above=None, warm=False):
    """``lloyd``, a trial's inertias logged and never abandoned."""
    if phase != "swap":
        return _lloyd(ctx, C, phase=phase, abandon_above=abandon_above, warm=warm)
    seen: list[float] = []

    def never(inertias: list[float], level: float) -> bool:
        seen.append(inertias[-1])
        return False

    rule, lloyd_module.bound_to_end_above = lloyd_module.bound_to_end_above, never
    try:
        out = _lloyd(ctx, C, phase=phase, abandon_above=abandon_above, warm=warm)
    finally:
        lloyd_module.bound_to_end_above = rule
    LOG.append({"level": abandon_above, "seq": seen, "conv": out[1]})
    return out


def main() -> None:
    torch.set_num_threads(2)
    search.lloyd = logged_lloyd
    name, seed = sys.argv[1], int(sys.argv[2])
    if name == "uniform":
        X, k = np.random.RandomState(1).rand(50000, 5).astype(np.float32), 100
    else:
        import common
        import compare

        ds = compare.build_dataset(common, name, False)
        X, k = ds.X, ds.k
    m = RBFKMeans(n_clusters=k, random_state=seed, max_iter=3000).fit(X)
    with open(f"trials-{name}-{seed}.json", "w") as f:
        json.dump({"inertia": m.inertia_, "log": LOG}, f)
    print(name, seed, m.inertia_, m.n_iter_, len(LOG))


if __name__ == "__main__":
    main()
