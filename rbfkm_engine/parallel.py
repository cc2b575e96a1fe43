"""Parallel passes on the CPU: a pass's row blocks spread over threads, one op at a time.

torch parallelises each op on its own (an OpenMP region per op, ending at a barrier), and a
pass is a few hundred ops per block. On a quiet machine that costs little; on a busy one
each barrier waits for whichever of its threads the scheduler has preempted, and a fit is
slowed tens of times more than the machine's load (benchmarks/README.md,
"Oversubscription"). scikit-learn's Lloyd step runs one parallel region per pass instead,
each thread taking whole blocks. :class:`BlockPool` does the same here: each of its threads
runs every op of a block single-threaded, and a pass waits once, at its end.

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
    """``threads`` threads that run a function over a pass's blocks; 1 runs them inline."""

    def __init__(self, threads: int = 1) -> None:
        self.threads = max(1, int(threads))
        self._executor: ThreadPoolExecutor | None = None
        if self.threads > 1:
            self._executor = ThreadPoolExecutor(
                self.threads, thread_name_prefix="rbfkm-block", initializer=_single_threaded
            )

    def map(self, fn: Callable[[slice], T], blocks: Sequence[slice]) -> Iterator[T]:
        """``fn(block)`` of every block, yielded in block order. At most two blocks per
        thread are started ahead of the one yielded, so a pass holds a few blocks' results
        at a time, not all of them. An exception raised for a block is raised here; the
        blocks not started then are not."""
        if self._executor is None or len(blocks) < 2:
            yield from (fn(block) for block in blocks)
            return
        executor = self._executor
        ahead = iter(blocks)
        pending: deque[Future[T]] = deque(
            executor.submit(fn, block) for block in islice(ahead, 2 * self.threads)
        )
        try:
            while pending:
                result = pending.popleft().result()
                block = next(ahead, None)
                if block is not None:
                    pending.append(executor.submit(fn, block))
                yield result
        finally:
            for future in pending:
                future.cancel()
            for future in pending:
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


def cpu_threads(device: torch.device) -> int:
    """Threads for a fit's block pool: torch's intra-op threads on the CPU, 1 elsewhere
    (a GPU pass is whole-array kernels, not blocks)."""
    return torch.get_num_threads() if device.type == "cpu" else 1
