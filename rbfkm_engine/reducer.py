"""Sums over the shards of a data-parallel fit: :class:`Reducer`.

Every global quantity of a fit is a sum over points. When ``fit`` runs on every rank of an
initialised ``torch.distributed`` process group, each rank holds a shard of the points and
each such sum is the all-reduced sum of the ranks' partial sums; every discrete decision
(splits, merges, re-seeds, moves, stopping) is then taken from the same reduced figures on
every rank, so the ranks stay in lockstep without sending decisions around.

:class:`Reducer` is the one place where the engine talks to the process group. Without a
group (or with a group of one process) it is the identity, and the fit runs exactly the
single-process path: callers ask ``reducer.active`` where the single-process path must
not change by a rounding.

A collective that fails (a rank died, a rank left the fit, the group's timeout expired)
raises :class:`ShardedFitError` on the ranks still running, never a hang beyond the
group's timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

try:  # torch built without distributed support still fits on one process
    import torch.distributed as dist
except ImportError:  # pragma: no cover - every supported torch build has it
    dist = None  # type: ignore[assignment]


class ShardedFitError(RuntimeError):
    """A collective of a data-parallel fit failed: a rank died, left the fit or timed out."""


class Reducer:
    """The collectives of one fit over ``group`` (``None``: a single process).

    Reductions keep the dtype and device of what they reduce; the backend's own device
    (CUDA for NCCL, the CPU for gloo) is used in between.
    """

    def __init__(self, group: Any = None) -> None:
        self.group = group
        self.active = group is not None
        self.rank = dist.get_rank(group) if self.active else 0
        self.world = dist.get_world_size(group) if self.active else 1
        self._device = torch.device("cpu")
        if self.active and dist.get_backend(group) == "nccl":
            self._device = torch.device("cuda", torch.cuda.current_device())

    @classmethod
    def current(cls) -> Reducer:
        """Over the default process group when one is initialised with several processes,
        else the identity."""
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return LOCAL
        if dist.get_world_size() < 2:
            return LOCAL
        return cls(dist.group.WORLD)

    @classmethod
    def of(cls, group: Any) -> Reducer:
        """Over ``group``: ``"default"`` (:meth:`current`), ``None`` (the identity) or a
        process group (the identity when it has one process)."""
        if isinstance(group, str):
            if group != "default":
                raise ValueError(f'process_group must be "default", None or a group, got {group!r}')
            return cls.current()
        if group is None or dist.get_world_size(group) < 2:
            return LOCAL
        return cls(group)

    # ------------------------------------------------------------------ collectives
    def _run(self, what: str, collective: Any, *args: Any, **kwargs: Any) -> None:
        """``collective(*args)`` over the group; a failure becomes :class:`ShardedFitError`."""
        try:
            collective(*args, group=self.group, **kwargs)
        except Exception as failed:  # gloo and NCCL raise RuntimeError subclasses
            raise ShardedFitError(
                f"{what} across the {self.world} processes of a data-parallel fit failed on "
                f"rank {self.rank}: another rank died, stopped, or called fit with other "
                f"parameters, or the process group's timeout expired ({failed})"
            ) from failed

    def sum(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` summed over the ranks (``t`` itself when not distributed)."""
        if not self.active:
            return t
        buffer = t.detach().to(self._device, copy=True).contiguous()
        self._run("a sum", dist.all_reduce, buffer, op=dist.ReduceOp.SUM)
        return buffer.to(t.device)

    def sum_many(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Each tensor summed over the ranks, by one collective (packed in float64; the
        tensors themselves when not distributed)."""
        if not self.active:
            return tensors
        flat = torch.cat([t.detach().reshape(-1).to(self._device, torch.float64) for t in tensors])
        self._run("a sum", dist.all_reduce, flat, op=dist.ReduceOp.SUM)
        out, start = [], 0
        for t in tensors:
            part = flat[start : start + t.numel()].view(t.shape)
            out.append(part.to(device=t.device, dtype=t.dtype))
            start += t.numel()
        return tuple(out)

    def sum_floats(self, *values: float) -> tuple[float, ...]:
        """Python numbers summed over the ranks, in float64."""
        if not self.active:
            return values
        (total,) = self.sum_many(torch.tensor(values, dtype=torch.float64))
        return tuple(float(v) for v in total.tolist())

    def max_float(self, value: float) -> float:
        """The largest ``value`` over the ranks (NaN on any rank: NaN)."""
        if not self.active:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self._device)
        nan = torch.tensor([float(value != value)], dtype=torch.float64, device=self._device)
        self._run("a maximum", dist.all_reduce, t, op=dist.ReduceOp.MAX)
        self._run("a maximum", dist.all_reduce, nan, op=dist.ReduceOp.MAX)
        return float("nan") if float(nan) > 0 else float(t)

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        """Every rank's ``t`` (the same shape and dtype on every rank), stacked in rank
        order: ``(world, *t.shape)``."""
        if not self.active:
            return t.unsqueeze(0)
        local = t.detach().to(self._device).contiguous()
        parts = [torch.empty_like(local) for _ in range(self.world)]
        self._run("a gather", dist.all_gather, parts, local)
        return torch.stack(parts).to(t.device)

    def gather_ints(self, value: int) -> list[int]:
        """Every rank's ``value``, in rank order."""
        if not self.active:
            return [int(value)]
        return [int(v) for v in self.gather(torch.tensor([value], dtype=torch.int64)).ravel()]

    def broadcast(self, t: torch.Tensor) -> torch.Tensor:
        """Rank 0's ``t`` on every rank (same shape and dtype everywhere)."""
        if not self.active:
            return t
        buffer = t.detach().to(self._device, copy=True).contiguous()
        self._run("a broadcast", dist.broadcast, buffer, src=dist.get_global_rank(self.group, 0))
        return buffer.to(t.device)

    def broadcast_ints(self, values: Sequence[int]) -> list[int]:
        """Rank 0's integers on every rank."""
        if not self.active:
            return [int(v) for v in values]
        return [int(v) for v in self.broadcast(torch.tensor(list(values), dtype=torch.int64))]

    def same_everywhere(self, value: int, what: str) -> None:
        """Raise ``ValueError`` naming ``what`` unless every rank has the same ``value``."""
        values = self.gather_ints(value)
        if len(set(values)) > 1:
            raise ValueError(
                f"every rank of a data-parallel fit must have the same {what}; "
                f"the ranks have {values}"
            )

    def on_rank0(self, callback: Callable[[Any], Any] | None) -> Callable[[Any], Any] | None:
        """``callback`` run on rank 0 only, its answer (stop or go on) told to every rank;
        ``None`` on every rank when rank 0 has none. The other ranks' callbacks are not
        called: one process reports the fit's progress."""
        if not self.active:
            return callback
        if not self.broadcast_ints([callback is not None])[0]:
            return None

        def told(info: Any) -> bool:
            stop = bool(callback(info)) if self.rank == 0 and callback is not None else False
            return bool(self.broadcast_ints([stop])[0])

        return told


#: The identity: a fit on one process.
LOCAL = Reducer()
