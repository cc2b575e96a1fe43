"""Parallel passes on the CPU: a pass's row blocks spread over threads, one op at a time.

torch parallelises each op on its own (an OpenMP region per op, ending at a barrier), and a
pass is a few hundred ops per block. On a quiet machine that costs little; on a busy one
each barrier waits for whichever of its threads the scheduler has preempted, and a fit is
slowed tens of times more than the machine's load (benchmarks/README.md,
"Oversubscription"). scikit-learn's Lloyd step runs one parallel region per pass instead,
each thread taking whole blocks. :class:`BlockPool` does the same here: each of its threads
(the caller's among them) runs every op of a block single-threaded, and a pass waits
once, at its end.

The results do not depend on the threads: every block's share of a pass's sums is computed
on its own and the shares are added in block order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import islice
from typing import TypeVar

import torch

T = TypeVar("T")

#: A pass is split into at least one block per thread only where each block keeps this
#: many rows: smaller blocks cost more in per-op overhead than the threads give back.
MIN_ROWS_PER_THREAD = 4096


def _single_threaded() -> None:
    """A pool thread's torch ops run on that thread alone (a per-thread setting)."""
    torch.set_num_threads(1)


class BlockPool:
    """``threads`` threads that run a function over a pass's blocks: the caller's own and
    ``threads - 1`` workers; 1 runs them inline."""

    def __init__(self, threads: int = 1) -> None:
        self.threads = max(1, int(threads))
        self._executor: ThreadPoolExecutor | None = None
        if self.threads > 1:
            self._executor = ThreadPoolExecutor(
                self.threads - 1, thread_name_prefix="rbfkm-block", initializer=_single_threaded
            )

    def map(self, fn: Callable[[slice], T], blocks: Sequence[slice]) -> Iterator[T]:
        """``fn(block)`` of every block, yielded in block order. At most two blocks per
        thread are started ahead of the one yielded, so a pass holds a few blocks' results
        at a time, not all of them. While the next block's result is not ready, the caller
        runs a block no worker has started (the latest), rather than wait: a worker
        woken from sleep can take longer to start than a block takes (a millisecond on a
        virtual machine), and the caller's thread is the pool's other thread. An
        exception raised for a block is raised here; the blocks not started then are
        not."""
        if self._executor is None or len(blocks) < 2:
            yield from (fn(block) for block in blocks)
            return
        executor = self._executor
        ahead = iter(blocks)
        pending: deque[tuple[Future[T], slice]] = deque(
            (executor.submit(fn, block), block) for block in islice(ahead, 2 * self.threads)
        )
        try:
            while pending:
                while not pending[0][0].done() and _run_one_here(fn, pending):
                    pass
                result = pending.popleft()[0].result()
                block = next(ahead, None)
                if block is not None:
                    pending.append((executor.submit(fn, block), block))
                yield result
        finally:
            for future, _ in pending:
                future.cancel()
            for future, _ in pending:
                if not future.cancelled():
                    future.exception()  # a block still running ends before the pass does

    def block_rows(self, n: int, chunk_size: int) -> int:
        """Rows per block for ``n`` rows: at most ``chunk_size``, and small enough that
        every thread gets a block when the blocks can keep :data:`MIN_ROWS_PER_THREAD`."""
        if self.threads == 1:
            return chunk_size
        share = -(-n // self.threads)
        return min(chunk_size, max(share, MIN_ROWS_PER_THREAD))

    def close(self) -> None:
        """Stop the threads (idle ones at once)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def __enter__(self) -> BlockPool:
        """While the block runs, the calling thread's own ops are single-threaded too:
        the passes' blocks are where the threads pay, and an op parallelised on its own
        is what a busy machine slows down (see the module's docstring)."""
        self._caller_threads = torch.get_num_threads()
        if self.threads > 1:
            torch.set_num_threads(1)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        if torch.get_num_threads() != self._caller_threads:
            torch.set_num_threads(self._caller_threads)


def _run_one_here(fn: Callable[[slice], T], pending: deque[tuple[Future[T], slice]]) -> bool:
    """Run on this thread the latest of the ``pending`` blocks that no worker has started,
    its future replaced by one holding the result; whether there was one."""
    for i in range(len(pending) - 1, -1, -1):
        future, block = pending[i]
        if future.cancel():  # not started: no worker will run it now
            done: Future[T] = Future()
            done.set_result(fn(block))
            pending[i] = (done, block)
            return True
    return False


def cpu_threads(device: torch.device) -> int:
    """Threads for a fit's block pool: torch's intra-op threads on the CPU, 1 elsewhere
    (a GPU pass is whole-array kernels, not blocks)."""
    return torch.get_num_threads() if device.type == "cpu" else 1
