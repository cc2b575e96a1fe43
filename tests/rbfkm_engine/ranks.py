"""Run a function on every rank of a gloo process group on loopback, one process per rank.

Plain spawned processes rather than ``torch.multiprocessing.spawn``: that one terminates
every rank as soon as one fails, and the tests of a rank that dies want to see what the
others do then.
"""

from __future__ import annotations

import multiprocessing
import pickle
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

#: Seconds a test's process group waits for a rank before its collectives fail.
GROUP_TIMEOUT_S = 20
#: Seconds the parent waits for its ranks to end.
JOIN_TIMEOUT_S = 300


def _rank_main(
    fn: Callable[..., Any],
    rank: int,
    world: int,
    store: str,
    out: str,
    args: tuple,
    timeout_s: float,
) -> None:
    """One rank: join the group, run ``fn(rank, world, *args)``, pickle what it returned
    (or the exception it raised) to ``out``."""
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=timeout_s),
    )
    try:
        result: Any = fn(rank, world, *args)
    except Exception as failed:  # reported to the parent, which asserts on it
        result = failed
    Path(out).write_bytes(pickle.dumps(result))
    dist.destroy_process_group()


def run_ranks(
    fn: Callable[..., Any],
    world: int,
    tmp: Path,
    *args: Any,
    timeout_s: float = GROUP_TIMEOUT_S,
) -> list[Any]:
    """``fn(rank, world, *args)`` on ``world`` processes joined by a FileStore under
    ``tmp`` (the group's collectives time out after ``timeout_s``); returns each rank's
    result (its exception if it raised, ``None`` if the process died without a result).
    ``fn`` must be importable (a module-level function)."""
    ctx = multiprocessing.get_context("spawn")
    store = tmp / "store"
    outs = [tmp / f"rank{rank}.pkl" for rank in range(world)]
    procs = [
        ctx.Process(
            target=_rank_main,
            args=(fn, rank, world, str(store), str(outs[rank]), args, timeout_s),
        )
        for rank in range(world)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(JOIN_TIMEOUT_S)
    for proc in procs:
        if proc.is_alive():
            proc.kill()
            raise AssertionError(f"rank process {proc.pid} still running after {JOIN_TIMEOUT_S}s")
    return [pickle.loads(out.read_bytes()) if out.exists() else None for out in outs]
