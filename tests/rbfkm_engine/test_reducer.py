"""A fit over the shards of a gloo process group equals the fit of the concatenated data.

Every case runs on 2, 3 and 4 processes on loopback: uneven shards, an empty shard (on 3),
sample weights on one rank only, an empty cluster re-seeded across shards; the sharded
fit's labels (each rank's, concatenated) equal the single-process fit's, its centres
within 1e-6 (float64), on every rank.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.datasets import make_blobs

from rbfkm_engine import RBFKMeans, local_search
from rbfkm_engine.reducer import LOCAL, Reducer, ShardedFitError

from .ranks import run_ranks

# Each case: estimator parameters and whether rank 0 alone passes sample weights.
CASES: dict[str, tuple[dict, bool]] = {
    "hard": ({"assignment": "hard", "n_clusters": 6, "n_init": 2}, False),
    "hard-random": ({"assignment": "hard", "n_clusters": 5, "init": "random"}, True),
    "softmax": ({"assignment": "softmax", "n_clusters": 6}, False),
    "entmax15": ({"assignment": "entmax15", "n_clusters": 7}, True),
    # Annealed past k: the cells' masses summed over the shards, their fit the same on
    # every rank.
    "overshoot": ({"assignment": "entmax15", "n_clusters": 7, "overshoot": 2.0}, True),
    # float64 data fitted in float32: labels_ and inertia_ come from predict's own pass.
    "entmax15-float32": ({"assignment": "entmax15", "n_clusters": 4, "dtype": "float32"}, False),
    # k chosen from the path (the gap statistic: reference sets in the union's principal
    # box, the same on every rank), its counts settled over the union of the shards.
    "auto": ({"assignment": "entmax15", "n_clusters": "auto", "max_clusters": 8}, True),
    # The silhouette: a sample drawn from the union's rows, the same on every rank.
    "auto-silhouette": (
        {"n_clusters": "auto", "max_clusters": 6, "criterion": "silhouette"},
        False,
    ),
}
#: Centres agree to this (absolute, data of unit scale); float32 sums in another order
#: round differently.
ATOL = {"entmax15-float32": 1e-4}
COMMON = {"dtype": "float64", "device": "cpu", "random_state": 3, "max_iter": 200}


def _estimator(params: dict) -> RBFKMeans:
    """``RBFKMeans(**params)``; a ``criterion`` entry sets how ``"auto"`` chooses k."""
    params = dict(params)
    criterion = params.pop("criterion", None)
    model = RBFKMeans(**params)
    if criterion is not None:
        model._k_criterion = criterion
    return model


def _data() -> tuple[np.ndarray, np.ndarray]:
    """Overlapping blobs (so the local search has moves to try) and rank 0's weights."""
    X, _ = make_blobs(n_samples=420, centers=5, cluster_std=1.6, random_state=0)
    weights = np.random.default_rng(1).uniform(0.2, 3.0, size=X.shape[0])
    return X, weights


def _bounds(world: int) -> list[int]:
    """Uneven shard boundaries; on 3 ranks the middle shard is empty."""
    n = _data()[0].shape[0]
    if world == 3:
        return [0, 100, 100, n]
    cuts = np.cumsum([k + 1 for k in range(world)])
    return [0] + [int(n * c / cuts[-1]) for c in cuts]


def _shard(rank: int, world: int) -> tuple[np.ndarray, np.ndarray | None]:
    X, weights = _data()
    bounds = _bounds(world)
    rows = slice(bounds[rank], bounds[rank + 1])
    return X[rows], weights[rows] if rank == 0 else None


def _concatenated(world: int, weighted: bool) -> tuple[np.ndarray, np.ndarray | None]:
    X, weights = _data()
    if not weighted:
        return X, None
    w = np.ones(X.shape[0])
    w[: _bounds(world)[1]] = weights[: _bounds(world)[1]]
    return X, w


def _init_with_an_empty_cluster(X: np.ndarray) -> np.ndarray:
    """Five centres, one of them far from every point: Lloyd re-seeds it."""
    init = X[:5].copy()
    init[4] = X.max(axis=0) + 100.0
    return init


def _fit_shards(rank: int, world: int) -> dict[str, dict]:
    """Every case's sharded fit on this rank."""
    X, weights = _shard(rank, world)
    out = {}
    cases = dict(CASES)
    cases["reseed"] = ({"assignment": "hard", "n_clusters": 5, "init": None}, False)
    for name, (params, weighted) in cases.items():
        params = {**COMMON, **params}
        if params.get("init", "") is None:
            params["init"] = _init_with_an_empty_cluster(_data()[0])
        model = _estimator(params).fit(X, sample_weight=weights if weighted else None)
        out[name] = _fitted(model)
    return out


def _fitted(model: RBFKMeans) -> dict:
    return {
        "centres": model.cluster_centers_,
        "labels": model.labels_,
        "inertia": model.inertia_,
        "n_iter": model.n_iter_,
        "history": model.history_,
        "path": [(count.k, count.inertia) for count in model.k_path_],
    }


def _single(world: int) -> dict[str, dict]:
    out = {}
    for name, (params, weighted) in CASES.items():
        X, w = _concatenated(world, weighted)
        out[name] = _fitted(_estimator({**COMMON, **params}).fit(X, sample_weight=w))
    X, _ = _data()
    init = _init_with_an_empty_cluster(X)
    params = {**COMMON, "assignment": "hard", "n_clusters": 5, "init": init}
    out["reseed"] = _fitted(RBFKMeans(**params).fit(X))
    return out


@pytest.mark.parametrize("world", [2, 3, 4])
def test_sharded_fit_equals_the_fit_of_the_concatenation(
    world: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = run_ranks(_fit_shards, world, tmp_path)
    for result in results:
        assert isinstance(result, dict), result
    # A one-process fit ends with sweeps of sequential Hartigan moves, which a sharded one
    # cannot run (each needs every row in turn): the reference goes without them.
    monkeypatch.setattr(local_search, "hartigan_sweep", lambda ws, state: None)
    expected = _single(world)
    for name, fit in expected.items():
        labels = np.concatenate([result[name]["labels"] for result in results])
        np.testing.assert_array_equal(labels, fit["labels"], err_msg=name)
        for result in results:
            got = result[name]
            atol = ATOL.get(name, 1e-6)
            np.testing.assert_allclose(got["centres"], fit["centres"], atol=atol, err_msg=name)
            rel = 1e-5 if name in ATOL else 1e-9
            assert got["inertia"] == pytest.approx(fit["inertia"], rel=rel), name
            assert [k for k, _ in got["path"]] == [k for k, _ in fit["path"]], name
            for (_, a), (_, b) in zip(got["path"], fit["path"], strict=True):
                assert (a is None) == (b is None), name
                assert a is None or a == pytest.approx(b, rel=rel), name
            assert got["n_iter"] == fit["n_iter"], name
            assert len(got["history"]) == len(fit["history"]), name
            assert np.array_equal(got["centres"], results[0][name]["centres"]), name


def _die_mid_fit(rank: int, world: int) -> str:
    """Rank 1 dies after a few blocks; rank 0 reports how its fit ended."""
    X, _ = _shard(rank, world)
    calls = []

    def should_stop() -> bool:
        calls.append(1)
        if rank == 1 and len(calls) > 20:
            os._exit(3)
        return False

    try:
        RBFKMeans(n_clusters=6, device="cpu", random_state=0).fit(X, should_stop=should_stop)
    except ShardedFitError as failed:
        return f"ShardedFitError: {failed}"
    return "finished"


def test_a_rank_that_dies_makes_the_others_fail_not_hang(tmp_path: Path) -> None:
    results = run_ranks(_die_mid_fit, 2, tmp_path)
    assert results[1] is None  # died without a result
    assert isinstance(results[0], str) and results[0].startswith("ShardedFitError"), results[0]
    assert "rank 0" in results[0]


def _stall_mid_fit(rank: int, world: int) -> str:
    """Rank 1 stops taking part for longer than the group's timeout; rank 0 reports how
    its fit ended, and how long it waited."""
    X, _ = _shard(rank, world)
    calls = []

    def should_stop() -> bool:
        calls.append(1)
        if rank == 1 and len(calls) == 20:
            time.sleep(3 * STALL_TIMEOUT_S)
        return False

    start = time.monotonic()
    try:
        RBFKMeans(n_clusters=6, device="cpu", random_state=0).fit(X, should_stop=should_stop)
    except ShardedFitError as failed:
        return f"ShardedFitError after {time.monotonic() - start:.0f} s: {failed}"
    return "finished"


#: The process group's timeout in the test of a rank that stalls.
STALL_TIMEOUT_S = 4


@pytest.mark.slow
def test_a_rank_that_stalls_makes_the_others_fail_after_the_timeout(tmp_path: Path) -> None:
    results = run_ranks(_stall_mid_fit, 2, tmp_path, timeout_s=STALL_TIMEOUT_S)
    # Had rank 0 waited for rank 1 to come back, its fit would have finished.
    assert results[0].startswith("ShardedFitError"), results[0]
    assert "timeout" in results[0].lower() or "timed out" in results[0].lower(), results[0]


def _progress_on_rank0(rank: int, world: int) -> tuple[int, int, int]:
    """Callbacks heard on this rank, the iterations done, and whether it stopped early
    (rank 0's callback stops the fit at its fifth iteration)."""
    X, _ = _shard(rank, world)
    heard = []

    def callback(info: object) -> bool:
        heard.append(info)
        return len(heard) >= 5

    model = RBFKMeans(n_clusters=4, device="cpu", random_state=0)
    model.fit(X, callback=callback)
    return len(heard), model.n_iter_, int(model.stopped_early_)


def test_the_callback_runs_on_rank_0_and_its_stop_reaches_every_rank(tmp_path: Path) -> None:
    results = run_ranks(_progress_on_rank0, 2, tmp_path)
    assert results == [(5, 5, 1), (0, 5, 1)]


def _mismatched_features(rank: int, world: int) -> str:
    X = np.zeros((10, 2 + rank))
    try:
        RBFKMeans(n_clusters=2, device="cpu").fit(X)
    except ValueError as failed:
        return str(failed)
    return "finished"


def test_shards_with_different_features_are_refused(tmp_path: Path) -> None:
    results = run_ranks(_mismatched_features, 2, tmp_path)
    assert all("same number of features" in result for result in results)


def test_without_a_process_group_the_reducer_is_the_identity() -> None:
    assert Reducer.current() is LOCAL
    t = torch.arange(3.0)
    assert LOCAL.sum(t) is t
    assert LOCAL.sum_floats(1.5, 2) == (1.5, 2)
    assert LOCAL.gather_ints(4) == [4]


def _local_fits(rank: int, world: int) -> tuple[np.ndarray, np.ndarray]:
    """This rank's shard fitted alone (``process_group=None``) inside the group."""
    X, _ = _shard(rank, world)
    model = RBFKMeans(n_clusters=3, device="cpu", random_state=0)
    return model.fit(X, process_group=None).cluster_centers_, X


def test_process_group_none_fits_the_rank_alone(tmp_path: Path) -> None:
    for centres, X in run_ranks(_local_fits, 2, tmp_path):
        alone = RBFKMeans(n_clusters=3, device="cpu", random_state=0).fit(X)
        np.testing.assert_array_equal(centres, alone.cluster_centers_)


def _wide() -> np.ndarray:
    """More features than rows: lambda_max comes from Lanczos over the shards."""
    X, _ = make_blobs(n_samples=90, centers=3, n_features=300, random_state=4)
    return X


def _wide_fit(rank: int, world: int) -> tuple[np.ndarray, np.ndarray]:
    X = _wide()
    rows = slice(0, 40) if rank == 0 else slice(40, None)
    model = RBFKMeans(n_clusters=3, assignment="softmax", dtype="float64", device="cpu")
    model.set_params(random_state=0).fit(X[rows])
    return model.cluster_centers_, model.labels_


def test_wide_data_anneal_from_the_same_temperatures(tmp_path: Path) -> None:
    results = run_ranks(_wide_fit, 2, tmp_path)
    single = RBFKMeans(n_clusters=3, assignment="softmax", dtype="float64", device="cpu")
    single.set_params(random_state=0).fit(_wide())
    np.testing.assert_array_equal(np.concatenate([r[1] for r in results]), single.labels_)
    for centres, _ in results:
        np.testing.assert_allclose(centres, single.cluster_centers_, atol=1e-6)
