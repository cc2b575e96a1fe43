"""The fused CPU kernels of the passes, compiled from C on first use.

A Lloyd pass in torch is a dozen ops per block of rows (the distance GEMM, a row minimum,
a check of the labels, the moved rows' sums), each a sweep over the block and each with a
dispatch cost; on few features the sweeps, not the arithmetic, set the pace.
``lloyd_kernel.c`` does a block in one call: every row's nearest centre (lowest index on
ties, as ``argmin``), its squared distance and its share of the M-step sums, with the
distances computed in registers when the rows have at most :data:`DIRECT_MAX_FEATURES`
features, else read from the block's GEMM; on few features it also keeps Hamerly's
bounds (:mod:`~rbfkm_engine.bounds`), or writes each row's second-nearest distance for the
local search. A Lloyd iteration's M-step, from the pass's float64 sums, is one call too
(:meth:`LloydKernel.update`), as is the sum of squares its inertia needs
(:meth:`LloydKernel.weighted_sum_sq`). The same library serves the annealing's soft
passes: a whole block of an entmax15 pass, distances, responsibilities and sums, in one
call (:meth:`LloydKernel.soft_block`) or, where a pass stays in torch, row minima with
their entmax15 candidate counts (:func:`row_minima`) and entmax15 of the soft rows
(:func:`entmax15_rows`); and the local search's batches and sweeps of Hartigan's method
(:meth:`LloydKernel.hartigan_batch`, :meth:`LloydKernel.hartigan_sweep`), and the picks of
farthest-first re-seeding (:meth:`LloydKernel.farthest_pick`). The blocks still
run on the fit's :class:`~rbfkm_engine.parallel.BlockPool` (``ctypes`` releases the GIL
during a call).

The library is built with the system's C compiler (``$CC``, else ``cc``) for the machine it
runs on, once, into a per-user cache (``$RBFKM_CACHE_DIR``, else ``$XDG_CACHE_HOME/rbfkm``
or ``~/.cache/rbfkm``) keyed by the source, the compiler, the flags and the CPU. Without a
compiler, or with ``RBFKM_NATIVE=0``, the passes stay in torch: the same labels (up to
ties within rounding) at torch's speed; only the Hartigan sweeps, which no torch op can
express (each move changes the means the next point is priced against), are skipped.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .bounds import GAP_BLOCK, Drift, rounding_margin
from .distances import squared_norms
from .kdtree import TREE_MAX_FEATURES, nearest_others
from .parallel import BlockPool

log = logging.getLogger(__name__)

#: ``RBFKM_NATIVE=0`` keeps every pass in torch.
SWITCH = "RBFKM_NATIVE"
#: Rows with at most this many features get their distances inside the kernel; beyond,
#: a GEMM's cache blocking computes them faster (benchmarks/README.md, "Fused Lloyd").
DIRECT_MAX_FEATURES = 32
#: The kernel reads this many columns at a time: padded widths are multiples of it.
LANES = 8
SOURCE = Path(__file__).with_name("lloyd_kernel.c")
#: Compiler flags, best first: a build for this CPU, then a portable one (no ``errno``
#: from the roots: a root is then one instruction, not a call guarded by a test).
FLAG_SETS = (("-O3", "-march=native", "-fno-math-errno"), ("-O3", "-fno-math-errno"))
#: Seconds a build may take before it is given up (the passes then stay in torch).
BUILD_TIMEOUT_S = 120

_P, _I = ctypes.c_void_p, ctypes.c_int64
_ARGTYPES = [_P, _I, _I, _P, _P, _P, _I, _P, _I, _P, _P, _P, _P, _P, _P, ctypes.c_int, _P]
_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}
_SCALAR = {torch.float32: ctypes.c_float, torch.float64: ctypes.c_double}

#: Kernel modes: add every row to its cluster's sums, move the rows whose label changed
#: between the sums, or label only.
ADD, MOVE, LABEL = 0, 1, 2


def cache_dir() -> Path:
    """Where built libraries are kept (see the module's docstring)."""
    if os.environ.get("RBFKM_CACHE_DIR"):
        return Path(os.environ["RBFKM_CACHE_DIR"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "rbfkm"
    try:
        return Path.home() / ".cache" / "rbfkm"
    except RuntimeError:  # no home directory: the system's temporary directory
        return Path(tempfile.gettempdir()) / f"rbfkm-{os.getuid()}"


def enabled() -> bool:
    """Whether the kernel may be used (``RBFKM_NATIVE`` is not ``0``/``false``/``no``)."""
    return os.environ.get(SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def _cpu_identity() -> str:
    """The CPU a ``-march=native`` build is for: its model and feature flags."""
    parts = [platform.machine()]
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags", "Features", "CPU part")):
                parts.append(line)
                if len(parts) > 4:
                    break
    except OSError:
        pass
    return "\n".join(parts)


def _build(compiler: str, flags: tuple[str, ...], target: Path) -> bool:
    """Compile :data:`SOURCE` into ``target`` (atomically); whether it worked (a cache
    that cannot be written, e.g. a read-only home, is a failed build)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
    except OSError as exc:
        log.info("rbfkm: cannot write the kernel's cache %s (%s)", target.parent, exc)
        return False
    cmd = [compiler, *flags, "-shared", "-fPIC", "-o", tmp, str(SOURCE)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        if done.returncode != 0:
            log.info("rbfkm: %s failed: %s", " ".join(cmd), done.stderr.strip()[:500])
            return False
        os.replace(tmp, target)
        return True
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.info("rbfkm: cannot build the Lloyd kernel (%s)", exc)
        return False
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _compiler_version(compiler: str) -> str | None:
    try:
        done = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


@functools.cache
def library() -> ctypes.CDLL | None:
    """The built kernel library, built on first call; ``None`` where it cannot be (no
    compiler, a failed build) or is switched off."""
    if not enabled():
        return None
    compiler = os.environ.get("CC", "cc")
    version = _compiler_version(compiler)
    if version is None:
        log.info("rbfkm: no C compiler (%s): the passes run in torch", compiler)
        return None
    source = SOURCE.read_bytes()
    for flags in FLAG_SETS:
        key = hashlib.sha256(
            b"\0".join(
                [source, version.encode(), " ".join(flags).encode(), _cpu_identity().encode()]
            )
        ).hexdigest()[:24]
        target = cache_dir() / "native" / f"lloyd-{key}.so"
        if target.exists() or _build(compiler, flags, target):
            try:
                lib = ctypes.CDLL(str(target))
            except OSError as exc:
                log.info("rbfkm: cannot load %s (%s)", target, exc)
                continue
            lib.lloyd_lanes.restype = ctypes.c_int64
            if lib.lloyd_lanes() != LANES:
                continue
            for dtype, suffix in _SUFFIX.items():
                fn = getattr(lib, f"lloyd_block_{suffix}")
                fn.restype, fn.argtypes = ctypes.c_int64, _ARGTYPES
                fn = getattr(lib, f"row_minima_{suffix}")
                fn.restype = ctypes.c_int64
                fn.argtypes = [_P, _I, _I, _I, _P, _SCALAR[dtype], _P, _P, _P, _P]
                fn = getattr(lib, f"lloyd_bounded_{suffix}")
                fn.restype = ctypes.c_int64
                fn.argtypes = [_P, _I, _I, *[_P] * 3, _I, *[_P] * 9, _SCALAR[dtype]]
                fn.argtypes += [_P, _P, _P, _I, _P, _P, _P, ctypes.c_int]
                fn = getattr(lib, f"centre_neighbours_{suffix}")
                fn.restype = None
                fn.argtypes = [_P, _P, *[_I] * 6, _P, _P, _P]
                fn = getattr(lib, f"refresh_neighbours_{suffix}")
                fn.restype = ctypes.c_int64
                fn.argtypes = [_P, _P, *[_I] * 6, _P, _P, _P, _SCALAR[dtype], _P, _P, _I, _I]
                fn.argtypes += [_P, _P, _P]
                fn = getattr(lib, f"two_nearest_listed_{suffix}")
                fn.restype = ctypes.c_int64
                fn.argtypes = [_P, _I, _I, *[_P] * 3, _I, *[_P] * 4, _SCALAR[dtype], *[_P] * 3]
                fn.argtypes += [_I, _P, _P, _P, _P]
                fn = getattr(lib, f"lloyd_update_{suffix}")
                fn.restype = ctypes.c_int64
                fn.argtypes = [_P, _P, _P, _I, _I, ctypes.c_double, ctypes.c_double, _P, _P, _P]
                fn = getattr(lib, f"entmax15_rows_{suffix}")
                fn.restype = None
                fn.argtypes = [_P, _I, _I, _I, _SCALAR[dtype], _P, _I, _P, _P, _P, _P]
                fn = getattr(lib, f"hartigan_sweep_{suffix}")
                fn.restype = ctypes.c_int64
                fn.argtypes = [_P, _I, _I, _P, _P, _I, _P, _P, _P, ctypes.c_double, _P, _P, _I]
                fn.argtypes += [ctypes.c_double, _P, _P, _P, _P]
                fn = getattr(lib, f"soft_block_{suffix}")
                fn.restype = None
                fn.argtypes = [*_ARGTYPES[:10], _I, _SCALAR[dtype], _I]
                fn.argtypes += [*[_P] * 12, _I, _SCALAR[dtype]]
                fn = getattr(lib, f"farthest_picks_{suffix}")
                fn.restype = ctypes.c_int64
                fn.argtypes = [_P, _I, _I, _P, _P, _SCALAR[dtype], _I, _P]
                fn = getattr(lib, f"weighted_sum_sq_{suffix}")
                fn.restype, fn.argtypes = ctypes.c_double, [_P, _I, _I, _P]
                fn = getattr(lib, f"centre_layout_{suffix}")
                fn.restype = None
                fn.argtypes = [_P, _P, *[_I] * 3, _P, _P]
                fn = getattr(lib, f"centre_drift_{suffix}")
                fn.restype = None
                fn.argtypes = [_P, _P, _I, _I, ctypes.c_int, _SCALAR[dtype], _P, _P, _P]
                fn = getattr(lib, f"hartigan_batch_{suffix}")
                fn.restype = ctypes.c_int64
                fn.argtypes = [*_ARGTYPES[:10], _P, _SCALAR[dtype], *[_P] * 5, _I]
                fn.argtypes += [_SCALAR[dtype], _SCALAR[dtype], _P]
                fn = getattr(lib, f"cluster_halves_{suffix}")
                fn.restype = None
                fn.argtypes = [_P, _I, _I, _P, _P, _I, _P, _P, _I, _I, _I, *[_P] * 7]
            for scratch in (lib.soft_scratch, lib.hartigan_scratch):
                scratch.restype, scratch.argtypes = ctypes.c_int64, [_I]
            return lib
    return None


@dataclass
class Centres:
    """The centres as the kernel reads them: ``c_sq`` padded to ``width`` columns with
    ``+inf`` (no minimum picks them) and, for direct distances, ``CT = -2 C^T`` (``d x
    width``, zero padding; the GEMM's factor folded in, exactly); ``CT`` is ``None`` where
    distances come from a GEMM."""

    c_sq: torch.Tensor
    CT: torch.Tensor | None
    width: int


@dataclass
class Neighbours:
    """Each centre's ``width`` nearest other centres as a bounded pass reads them
    (``centre_neighbours`` in the kernel): ``order`` (``k x width``, int32, nearest first,
    -1 past the others), ``gap`` (``k x width``, their distances, ``+inf`` past the others)
    and ``lists`` (``k x (d + 1) x width``: each list's ``c_sq``, then its columns of
    ``CT``), so that a row's scan of its old centre's list reads vectors."""

    order: torch.Tensor
    gap: torch.Tensor
    lists: torch.Tensor

    @classmethod
    def empty(cls, k: int, d: int, width: int, dtype: torch.dtype) -> Neighbours:
        return cls(
            torch.empty((k, width), dtype=torch.int32),
            torch.empty((k, width), dtype=dtype),
            torch.empty((k, d + 1, width), dtype=dtype),
        )

    @property
    def width(self) -> int:
        return self.order.shape[1]

    def pointers(self) -> tuple[int, int, int]:
        """``order``, ``gap`` and ``lists`` as the kernel takes them."""
        return self.order.data_ptr(), self.gap.data_ptr(), self.lists.data_ptr()

    def trace(self, C: torch.Tensor) -> ListTrace:
        """What the next lists are kept up from, these made at centres ``C``."""
        return ListTrace(self.order, self.gap, C.clone())


@dataclass
class ListTrace:
    """What a pass's neighbour lists leave for the next pass to keep its lists up from
    (:meth:`LloydKernel.refresh_neighbours`): their ``order`` and ``gap`` and the
    ``centres`` they were made at, not the lists' vectors (as large as the rows)."""

    order: torch.Tensor
    gap: torch.Tensor
    centres: torch.Tensor


def _list_shape(
    centres: Centres, k: int, into: Neighbours, span: slice
) -> tuple[int, int, int, int, int, int, int, int]:
    """The arguments every neighbour-list call of the kernel starts with: the centres
    (direct distances), ``k``, the features, the lists' width and the span's bounds."""
    assert centres.CT is not None
    start, stop, _ = span.indices(k)
    CT = centres.CT
    return (
        CT.data_ptr(),
        centres.c_sq.data_ptr(),
        centres.width,
        k,
        CT.shape[0],
        into.width,
        start,
        stop,
    )


@dataclass
class NeighbourMoves:
    """How the centres moved since their last neighbour lists were made: ``own`` (``k``,
    each centre's move), the ``movers`` (int32 indices of the centres that moved farthest,
    and ``mask``, ``k`` uint8 flags of them) and ``rest``, a bound on every other centre's
    move."""

    own: torch.Tensor
    movers: torch.Tensor
    mask: torch.Tensor
    rest: float

    @classmethod
    def between(cls, before: torch.Tensor, after: torch.Tensor, movers: int) -> NeighbourMoves:
        """The moves from centres ``before`` to ``after``, the ``movers`` farthest apart."""
        own = (after - before).square_().sum(dim=1).sqrt_()
        movers = min(movers, own.shape[0] - 1)
        top = torch.topk(own, movers + 1)
        mask = torch.zeros(own.shape[0], dtype=torch.uint8)
        mask[top.indices[:movers]] = 1
        picked = top.indices[:movers].to(torch.int32).contiguous()
        return cls(own.contiguous(), picked, mask, float(top.values[movers]))


#: A block of rows as :meth:`LloydKernel.cluster_halves` reads it: the rows, their
#: weights (``None``: all 1) and their labels.
LabelledRows = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]


@dataclass
class Rows:
    """A block of rows as the kernel reads and writes them: ``X`` (``m x d``, rows
    contiguous), their squared norms ``x_sq`` and weights ``w`` (``None``: all 1), and
    the per-row outputs ``labels`` (in: the last pass's), ``min_dist`` and, where
    :meth:`LloydKernel.block` is to write it, the second-nearest squared distance
    ``second``."""

    X: torch.Tensor
    x_sq: torch.Tensor
    w: torch.Tensor | None
    labels: torch.Tensor
    min_dist: torch.Tensor
    second: torch.Tensor | None = None


@dataclass(frozen=True)
class SoftMap:
    """The map of a soft pass: entmax15 at temperature ``sigma``; the columns from
    ``twins_from`` on (``None``: none) are the twins of those before them, counted with
    them among the nonzeros."""

    sigma: float
    twins_from: int | None


@dataclass(frozen=True)
class RowLists:
    """Neighbour lists a pass takes its rows' candidates from (an entmax15 pass, a batch
    of Hartigan moves), made at its centres, and the rounding error of the rows' squared
    distances to them
    (:func:`~rbfkm_engine.bounds.squared_rounding_error`)."""

    neighbours: Neighbours
    error: float


@dataclass
class SoftParts:
    """A block's share of a soft pass, float64, as the kernel adds to it: the M-step sums
    ``num`` (``k x d``) and ``den`` (``k``), the per-centre ``spread`` (``None``: not
    needed) and ``stats``: ``sum_i w_i energy_i``, ``sum_i w_i min_dist_i``, the nonzero
    responsibilities, the rows that are not one-hot and their weight, the weight of the
    rows shared by two centres or more (a centre's twin counted with it), and the rows
    neighbour lists served and the candidates those computed."""

    num: torch.Tensor
    den: torch.Tensor
    spread: torch.Tensor | None
    stats: torch.Tensor

    @classmethod
    def zeros(cls, k: int, d: int, spread: bool) -> SoftParts:
        def zeros(*shape: int) -> torch.Tensor:
            return torch.zeros(shape, dtype=torch.float64)

        return cls(zeros(k, d), zeros(k), zeros(k) if spread else None, zeros(8))


@dataclass
class HartiganState:
    """What sweeps of Hartigan's method carry from one to the next: ``labels`` (int64),
    the clusters' ``means`` (``k x d``) and ``mass`` (``k``), float64, and the bounds that
    let a sweep skip rows: ``lower``, each row's distance to the other clusters' means
    (float64; zeros: price every row), and ``travel``, the longest path of a mean over
    the last sweep; ``gain``: the inertia the last sweep's moves saved; ``path``, each
    mean's path in the sweep under way. ``order`` and
    ``gaps`` (``k x width``, int64 and float64; ``None``: price every cluster): for each
    cluster, its ``width`` nearest clusters by the distance between their means,
    ascending, as :meth:`sort_gaps` makes them before a sweep."""

    labels: torch.Tensor
    means: torch.Tensor
    mass: torch.Tensor
    lower: torch.Tensor
    travel: float = 0.0
    gain: float = 0.0
    order: torch.Tensor | None = None
    gaps: torch.Tensor | None = None
    path: torch.Tensor = field(init=False)

    def __post_init__(self) -> None:
        self.path = torch.zeros(self.means.shape[0], dtype=torch.float64)

    def sort_gaps(self, width: int, pool: BlockPool | None = None) -> None:
        """``gaps`` and ``order`` of the means as they are now, at most ``width`` per
        cluster (itself first, unless another mean coincides with it), ``GAP_BLOCK``
        clusters at a time, on ``pool``'s threads where given (each block its own rows),
        or beyond one block, in at most ``TREE_MAX_FEATURES`` features, from a k-d tree
        (:mod:`~rbfkm_engine.kdtree`); the gaps are lowered by their rounding."""
        means = self.means
        k, d = means.shape
        width = min(width, k)
        c_sq_max = float(squared_norms(means).max())
        margin = rounding_margin(c_sq_max, c_sq_max, d, means.dtype)
        if k > GAP_BLOCK and d <= TREE_MAX_FEATURES and width > 1:
            distance, index = nearest_others(means.numpy(), width)
            self.gaps = torch.from_numpy(distance).sub_(margin)
            self.order = torch.from_numpy(index)
            return
        self.gaps = gaps = torch.empty((k, width), dtype=torch.float64)
        self.order = order = torch.empty((k, width), dtype=torch.long)

        def block(rows: slice) -> None:
            near = torch.cdist(means[rows], means)
            torch.topk(near, width, dim=1, largest=False, out=(gaps[rows], order[rows]))

        blocks = [slice(start, start + GAP_BLOCK) for start in range(0, k, GAP_BLOCK)]
        for _ in pool.map(block, blocks) if pool is not None else map(block, blocks):
            pass
        gaps.sub_(margin)


class LloydKernel:
    """The kernel for one fit's data type."""

    def __init__(self, lib: ctypes.CDLL, dtype: torch.dtype) -> None:
        self._fn = getattr(lib, f"lloyd_block_{_SUFFIX[dtype]}")
        self._bounded = getattr(lib, f"lloyd_bounded_{_SUFFIX[dtype]}")
        self._neighbours = getattr(lib, f"centre_neighbours_{_SUFFIX[dtype]}")
        self._refresh = getattr(lib, f"refresh_neighbours_{_SUFFIX[dtype]}")
        self._two_listed = getattr(lib, f"two_nearest_listed_{_SUFFIX[dtype]}")
        self._farthest = getattr(lib, f"farthest_picks_{_SUFFIX[dtype]}")
        self._update = getattr(lib, f"lloyd_update_{_SUFFIX[dtype]}")
        self._sum_sq = getattr(lib, f"weighted_sum_sq_{_SUFFIX[dtype]}")
        self._drift = getattr(lib, f"centre_drift_{_SUFFIX[dtype]}")
        self._layout = getattr(lib, f"centre_layout_{_SUFFIX[dtype]}")
        self._hartigan = getattr(lib, f"hartigan_sweep_{_SUFFIX[dtype]}")
        self._soft = getattr(lib, f"soft_block_{_SUFFIX[dtype]}")
        self._soft_scratch = lib.soft_scratch
        self._batch = getattr(lib, f"hartigan_batch_{_SUFFIX[dtype]}")
        self._batch_scratch = lib.hartigan_scratch
        self._halves = getattr(lib, f"cluster_halves_{_SUFFIX[dtype]}")
        self.dtype = dtype
        self._local = threading.local()

    @staticmethod
    def direct(n_features: int) -> bool:
        """Whether rows of ``n_features`` get their distances in the kernel (no GEMM)."""
        return n_features <= DIRECT_MAX_FEATURES

    def centres(self, C: torch.Tensor, width: int, direct: bool | None = None) -> Centres:
        """``C`` laid out for the kernel, ``width`` columns (a multiple of :data:`LANES`,
        at least ``k``), for direct distances as :meth:`direct` says or as ``direct``
        says where it is given."""
        k, d = C.shape
        C = C.contiguous()
        norms = squared_norms(C)  # torch's sums, as every other pass at C takes them
        c_sq = torch.empty(width, dtype=C.dtype)
        CT = None
        if self.direct(d) if direct is None else direct:
            CT = torch.empty((d, width), dtype=C.dtype)
        self._layout(
            C.data_ptr(),
            norms.data_ptr(),
            k,
            d,
            width,
            c_sq.data_ptr(),
            None if CT is None else CT.data_ptr(),
        )
        return Centres(c_sq, CT, width)

    def block(
        self,
        rows: Rows,
        centres: Centres,
        D: torch.Tensor | None,
        num: torch.Tensor | None,
        den: torch.Tensor | None,
        mode: int,
    ) -> float:
        """One block: ``labels``, ``min_dist`` and ``second`` (where the rows carry it)
        written, the sums (float64) added to as ``mode`` says; returns the block's
        ``sum_i w_i min_dist_i``. ``D``: the block's partial distances (``c_sq - 2 X
        C^T``, ``centres.width`` columns, padding ``+inf``) where the centres carry no
        ``CT``."""
        inertia = ctypes.c_double()
        self._fn(
            *_block_args(rows, centres, D),
            rows.labels.data_ptr(),
            rows.min_dist.data_ptr(),
            None if rows.second is None else rows.second.data_ptr(),
            None if num is None else num.data_ptr(),
            None if den is None else den.data_ptr(),
            mode,
            ctypes.byref(inertia),
        )
        return inertia.value

    def soft_block(
        self,
        rows: Rows,
        centres: Centres,
        D: torch.Tensor | None,
        soft: SoftMap,
        sums: SoftParts,
        lists: RowLists | None = None,
    ) -> None:
        """One block of an entmax15 pass (``soft``: its temperature and the twins):
        ``labels`` and ``min_dist`` written, the block's responsibilities added to
        ``sums``. ``D``: as :meth:`block`'s. ``lists`` (direct distances only): a row
        labelled by a centre takes its candidates from that centre's list where the list
        holds every centre its map may use; the values are a scan's, bit for bit."""
        k = sums.den.shape[0]
        twins = k if soft.twins_from is None else soft.twins_from
        scratch, cols, mark = self._soft_buffers(centres.width, k, rows.X.dtype)
        listed: tuple[int | float | None, ...] = (None, None, None, 0, 0.0)
        if lists is not None:
            nb = lists.neighbours
            assert centres.CT is not None and D is None and k > nb.width
            order, gap, vectors = nb.pointers()
            listed = (vectors, order, gap, nb.width, lists.error)
        self._soft(
            *_block_args(rows, centres, D),
            *(k, soft.sigma, twins),
            rows.labels.data_ptr(),
            rows.min_dist.data_ptr(),
            sums.num.data_ptr(),
            sums.den.data_ptr(),
            None if sums.spread is None else sums.spread.data_ptr(),
            sums.stats.data_ptr(),
            scratch.data_ptr(),
            cols.data_ptr(),
            mark.data_ptr(),
            *listed,
        )

    def _soft_buffers(
        self, width: int, k: int, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """This thread's scratch of :meth:`soft_block` for ``width`` columns and ``k``
        centres: values, column indices and ``k`` zeroed bytes (the kernel leaves them
        zeroed), grown when too small and kept between passes (a small pass costs a few
        allocations less). The column indices are twice ``width``: a listed row's
        candidates take the second half."""
        held = getattr(self._local, "soft", None)
        size = int(self._soft_scratch(width))
        if (
            held is None
            or held[0].dtype != dtype
            or held[0].numel() < size
            or held[1].numel() < 2 * width
            or held[2].numel() < k
        ):
            held = (
                torch.empty(size, dtype=dtype),
                torch.empty(2 * width, dtype=torch.long),
                torch.zeros(k, dtype=torch.uint8),
            )
            self._local.soft = held
        return held

    def update(
        self,
        sums: tuple[torch.Tensor, torch.Tensor],
        C: torch.Tensor,
        sum_sq: float,
        den_floor: float,
        C_new: torch.Tensor,
    ) -> tuple[float, float, int]:
        """The M-step of a Lloyd pass from its float64 ``sums`` (``num``, ``den``): the
        centres ``C_new`` (``k x d``, contiguous) ``num / den`` in ``C``'s type, a cluster
        of weight at most ``den_floor`` being empty (its row of ``C_new`` is left for the
        caller to re-seed). Returns the pass's inertia (from the sums and ``sum_sq =
        sum_i w_i ||x_i||^2``, in float64), ``||C_new - C||^2`` over the clusters that are
        not empty (float64) and the count of empty ones."""
        inertia, shift = ctypes.c_double(), ctypes.c_double()
        k, d = C.shape
        n_empty = self._update(
            sums[0].data_ptr(),
            sums[1].data_ptr(),
            C.data_ptr(),
            k,
            d,
            sum_sq,
            den_floor,
            C_new.data_ptr(),
            ctypes.byref(inertia),
            ctypes.byref(shift),
        )
        return inertia.value, shift.value, int(n_empty)

    def bounded_block(
        self,
        rows: Rows,
        centres: Centres,
        bounds: tuple[torch.Tensor, torch.Tensor],
        drift: Drift | None,
        margin: float,
        sums: tuple[torch.Tensor, torch.Tensor, int],
        neighbours: Neighbours | None = None,
    ) -> tuple[int, int, int]:
        """One block of a pass with Hamerly's bounds (direct distances only; see
        :mod:`~rbfkm_engine.bounds`), ``sums`` the float64 ``(num, den)`` and ``ADD`` or
        ``MOVE``: with ``drift`` ``None`` every row is labelled, its bounds ``(upper,
        lower)`` set and its weight added to the sums (``ADD``) or, where its label
        changed, moved between them (``MOVE``); with a ``drift`` (``MOVE``) only the rows
        whose moved bounds fail are labelled again (their ``min_dist`` written) and moved
        between the sums, from their old centre's
        ``neighbours`` where those decide the nearest, else against every centre (with
        lists, ``drift.near`` moves the lower bounds: see :class:`~rbfkm_engine.bounds.Drift`).
        Returns the rows labelled, how many of them the lists decided, and the
        candidates those computed."""
        assert centres.CT is not None
        nb = neighbours if drift is not None else None
        num, den, mode = sums
        counts = (ctypes.c_int64 * 2)()
        relabelled = self._bounded(
            *_direct_args(rows, centres),
            bounds[0].data_ptr(),
            bounds[1].data_ptr(),
            None if drift is None else drift.own.data_ptr(),
            None if drift is None else drift.others.data_ptr(),
            None if nb is None or drift is None or drift.near is None else drift.near.data_ptr(),
            None if drift is None else drift.half_gap.data_ptr(),
            margin,
            None if nb is None else nb.lists.data_ptr(),
            None if nb is None else nb.order.data_ptr(),
            None if nb is None else nb.gap.data_ptr(),
            0 if nb is None else nb.width,
            counts,
            num.data_ptr(),
            den.data_ptr(),
            0 if drift is not None else 1 if mode == ADD else 2,
        )
        return int(relabelled), counts[0], counts[1]

    def two_nearest_listed(
        self,
        rows: Rows,
        centres: Centres,
        neighbours: Neighbours,
        margin: float,
        sums: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[float, int, int]:
        """Each row's nearest and second-nearest centre, as :meth:`block` writes them
        (``rows.second`` given; every row added to the float64 ``sums``, where given),
        from the neighbour list of the row's centre so far (``rows.labels``, any centre)
        where the triangle inequality decides both, else against every centre (direct
        distances only). Returns the block's ``sum_i w_i min_dist_i``, the rows the lists
        decided and the candidates those computed."""
        assert centres.CT is not None and rows.second is not None
        scanned, inertia = ctypes.c_int64(), ctypes.c_double()
        decided = self._two_listed(
            *_direct_args(rows, centres),
            rows.second.data_ptr(),
            margin,
            neighbours.lists.data_ptr(),
            neighbours.order.data_ptr(),
            neighbours.gap.data_ptr(),
            neighbours.width,
            ctypes.byref(scanned),
            None if sums is None else sums[0].data_ptr(),
            None if sums is None else sums[1].data_ptr(),
            ctypes.byref(inertia),
        )
        return inertia.value, int(decided), scanned.value

    def neighbours(
        self,
        centres: Centres,
        k: int,
        into: Neighbours,
        span: slice,
    ) -> None:
        """The neighbour lists of the centres ``span`` (of ``k``, laid out for direct
        distances) into ``into``, each by a scan of every centre; spans may be filled on
        different threads."""
        self._neighbours(*_list_shape(centres, k, into, span), *into.pointers())

    def refresh_neighbours(
        self,
        centres: Centres,
        k: int,
        into: Neighbours,
        span: slice,
        last: ListTrace,
        moves: NeighbourMoves,
        keep: int,
    ) -> int:
        """The neighbour lists of the centres ``span`` kept up from ``last`` (made at
        centres that have since moved as ``moves`` says) into ``into``: what
        :meth:`neighbours` gives a bounded pass, where the triangle inequality allows
        without a scan of every centre (``refresh_neighbours`` in the kernel). A list whose
        bound on the centres it leaves out falls below its gap at position ``keep`` is
        made as :meth:`neighbours` makes it. Returns the lists so made; needs ``k`` above
        the lists' width."""
        assert k > into.width
        moved = (moves.own.data_ptr(), moves.rest, moves.mask.data_ptr())
        return int(
            self._refresh(
                *_list_shape(centres, k, into, span),
                last.order.data_ptr(),
                last.gap.data_ptr(),
                *moved,
                moves.movers.data_ptr(),
                moves.movers.numel(),
                keep,
                *into.pointers(),
            )
        )

    def farthest_pick(
        self, P: torch.Tensor, values: torch.Tensor, index: torch.Tensor, outside: float
    ) -> int | None:
        """One farthest-first pick among the pool ``P`` (``m x d``, contiguous, the
        kernel's type): the position of the largest of ``values`` (the points' squared
        distances to the centres, of ``P``'s type; ties: the lowest ``index``, int64),
        whose distances then lower ``values`` in place; ``None`` (nothing changed) where
        that value is not above ``outside``."""
        assert P.is_contiguous() and values.is_contiguous() and index.is_contiguous()
        m, d = P.shape
        taken = ctypes.c_int64(-1)
        made = self._farthest(
            P.data_ptr(), m, d, values.data_ptr(), index.data_ptr(), outside, 1, ctypes.byref(taken)
        )
        return taken.value if made else None

    def weighted_sum_sq(self, X: torch.Tensor, w: torch.Tensor | None) -> float:
        """``sum_i w_i ||x_i||^2`` of the rows ``X`` (contiguous, the kernel's type; ``w``:
        ``None`` for all 1), in float64 without a float64 copy of ``X``."""
        m, d = X.shape
        return float(self._sum_sq(X.data_ptr(), m, d, None if w is None else w.data_ptr()))

    def centre_drift(
        self, C: torch.Tensor, old: torch.Tensor, margin: float, gaps: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """How the centres ``C`` moved from ``old`` (both contiguous, the kernel's type):
        each one's move and the largest move of any other, rounded up, and, with ``gaps``,
        half its distance to the nearest other less ``margin``, rounded down (else the
        third tensor is left for the caller to fill); see :class:`~rbfkm_engine.bounds.Drift`.
        """
        k, d = C.shape
        own, others, half_gap = torch.empty((3, k), dtype=C.dtype).unbind()
        self._drift(
            C.data_ptr(),
            old.data_ptr(),
            k,
            d,
            int(gaps),
            margin,
            own.data_ptr(),
            others.data_ptr(),
            half_gap.data_ptr(),
        )
        return own, others, half_gap

    def hartigan_batch(
        self,
        rows: Rows,
        centres: Centres,
        D: torch.Tensor | None,
        mass: torch.Tensor,
        keep: float,
        lists: RowLists | None = None,
        least: float = 0.0,
    ) -> tuple[int, int, int]:
        """A batch of Hartigan moves over the block, all at the same means (as
        :func:`~rbfkm_engine.swaps.hartigan_targets` makes them, ``keep`` its ``1 -
        HARTIGAN_MIN_GAIN``): ``rows.labels`` moved in place; ``mass``: the clusters'
        weights, ``centres.width`` values (the padding any positive value). ``D``: as
        :meth:`block`'s. ``lists`` (direct distances, made at the means; ``least``: the
        least mass, above 0): a row takes its candidates from its cluster's list where
        that decides its move, the same move. Returns how many rows moved, how many the
        lists decided and the candidates they computed."""
        scratch = torch.empty(int(self._batch_scratch(centres.width)), dtype=rows.X.dtype)
        counts = torch.zeros(2, dtype=torch.int64)
        listed: tuple[int | float | None, ...] = (None, None, None, 0, 0.0, 0.0)
        if lists is not None:
            nb = lists.neighbours
            assert centres.CT is not None and D is None and least > 0.0
            order, gap, vectors = nb.pointers()
            listed = (vectors, order, gap, nb.width, lists.error, least)
        moved = self._batch(
            *_block_args(rows, centres, D),
            mass.data_ptr(),
            keep,
            rows.labels.data_ptr(),
            scratch.data_ptr(),
            *listed,
            counts.data_ptr(),
        )
        return int(moved), int(counts[0]), int(counts[1])

    def cluster_halves(
        self,
        blocks: Callable[[], Iterator[LabelledRows]],
        C: torch.Tensor,
        axis: torch.Tensor,
        only: torch.Tensor | None,
        steps: tuple[int, int],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every cluster split in two, as :func:`~rbfkm_engine.search_passes.cluster_halves`
        does it in torch, in float64: ``steps[0]`` power iterations of each cluster's
        scatter about its centre in ``C`` from ``axis`` (``k x d``), then ``steps[1]``
        2-means steps after the first split. ``blocks()`` yields the rows (contiguous, the
        kernel's type), weights (``None``: all 1) and labels of a pass, block by block,
        anew for each step. ``only`` (``(k,)`` bool): those clusters alone (the others get
        ``C``'s rows, weight 0). Returns the halves' means ``(k, 2, d)`` and weights
        ``(k, 2)``, float64."""
        k, d = C.shape
        C64 = C.double().contiguous()
        axis = axis.double().contiguous().clone()
        halves = torch.empty((k, 2, d), dtype=torch.float64)
        mass = torch.empty((k, 2), dtype=torch.float64)
        along, normal = (torch.empty((k, d), dtype=torch.float64) for _ in range(2))
        weight, at = (torch.empty(k, dtype=torch.float64) for _ in range(2))
        mask = None if only is None else only.to(torch.uint8).contiguous()
        state = [t.data_ptr() for t in (axis, halves, mass, along, weight, normal, at)]
        power, split = steps

        def call(step: int, mode: int, rows: LabelledRows | None = None) -> None:
            X, w, labels = rows if rows is not None else (None, None, None)
            self._halves(
                None if X is None else X.data_ptr(),
                0 if X is None else X.shape[0],
                d,
                None if w is None else w.data_ptr(),
                None if labels is None else labels.data_ptr(),
                k,
                C64.data_ptr(),
                None if mask is None else mask.data_ptr(),
                step,
                power,
                mode,
                *state,
            )

        for step in range(power + split + 1):
            call(step, 0)
            for rows in blocks():
                call(step, 1, rows)
            call(step, 2)
        return halves, mass

    def hartigan_sweep(
        self,
        X: torch.Tensor,
        w: torch.Tensor | None,
        state: HartiganState,
        block: slice,
        min_gain: float,
    ) -> tuple[int, float]:
        """A sweep of Hartigan's method over the rows ``X`` (contiguous, the kernel's
        type) and their weights ``w`` (``None``: all 1), rows ``block`` of ``state``'s, in
        row order: each row moves, when that lowers the inertia by more than ``min_gain``
        of what leaving its cluster saves, to the cluster where it costs least, ``state``
        following every move. Blocks after one another in one sweep carry ``state.path``,
        which the sweep zeroes first. Returns the moves and the inertia they saved."""
        m, d = X.shape
        k = state.means.shape[0]
        scratch = torch.empty(d, dtype=torch.float64)
        mark = torch.zeros(k, dtype=torch.uint8)
        saved = ctypes.c_double()
        moves = self._hartigan(
            X.data_ptr(),
            m,
            d,
            None if w is None else w.data_ptr(),
            state.labels[block].data_ptr(),
            k,
            state.means.data_ptr(),
            state.mass.data_ptr(),
            state.lower[block].data_ptr(),
            state.travel,
            None if state.order is None else state.order.data_ptr(),
            None if state.gaps is None else state.gaps.data_ptr(),
            0 if state.order is None else state.order.shape[1],
            min_gain,
            scratch.data_ptr(),
            state.path.data_ptr(),
            mark.data_ptr(),
            ctypes.byref(saved),
        )
        return int(moves), saved.value


def _block_args(rows: Rows, centres: Centres, D: torch.Tensor | None) -> list[int | None]:
    """The arguments ``lloyd_block``, ``soft_block`` and ``hartigan_batch`` start with:
    the rows, the centres and the block's partial distances."""
    m, d = rows.X.shape
    return [
        rows.X.data_ptr(),
        m,
        d,
        rows.x_sq.data_ptr(),
        None if centres.CT is None else centres.CT.data_ptr(),
        centres.c_sq.data_ptr(),
        centres.width,
        None if D is None else D.data_ptr(),
        0 if D is None else D.stride(0),
        None if rows.w is None else rows.w.data_ptr(),
    ]


def _direct_args(rows: Rows, centres: Centres) -> list[int | None]:
    """The arguments ``lloyd_bounded`` and ``two_nearest_listed`` start with: the rows,
    the centres (direct distances), the weights, and the labels and distances written."""
    assert centres.CT is not None
    m, d = rows.X.shape
    return [
        rows.X.data_ptr(),
        m,
        d,
        rows.x_sq.data_ptr(),
        centres.CT.data_ptr(),
        centres.c_sq.data_ptr(),
        centres.width,
        None if rows.w is None else rows.w.data_ptr(),
        rows.labels.data_ptr(),
        rows.min_dist.data_ptr(),
    ]


def lloyd_kernel(X: torch.Tensor, sample_weight: torch.Tensor | None) -> LloydKernel | None:
    """The kernel for the passes over ``X`` (CPU, float32 or float64, rows contiguous, the
    weights of ``X``'s type), or ``None``: the passes then run in torch."""
    if X.device.type != "cpu" or X.dtype not in _SUFFIX or not X.is_contiguous():
        return None
    if sample_weight is not None and (
        sample_weight.dtype != X.dtype or not sample_weight.is_contiguous()
    ):
        return None
    lib = library()
    return None if lib is None else LloydKernel(lib, X.dtype)


def row_minima(
    D: torch.Tensor, row_offset: torch.Tensor | None, threshold: float | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None] | None:
    """Each row's minimum of a block of partial distances ``D``, its true squared distance
    (``row_offset`` added, clamped at 0), its column (the lowest on ties) and, with
    ``threshold``, its count of columns below ``minimum + threshold`` (int32): one sweep
    of the kernel for what takes torch a row minimum, an argmin and a mask. ``None`` where
    the kernel is not there or ``D`` is not a CPU float32/float64 block with contiguous
    rows."""
    if (
        D.device.type != "cpu"
        or D.dtype not in _SUFFIX
        or D.dim() != 2
        or (D.shape[1] > 1 and D.stride(1) != 1)
    ):
        return None
    lib = library()
    if lib is None:
        return None
    m, k = D.shape
    offset = torch.zeros(m, dtype=D.dtype) if row_offset is None else row_offset.to(D.dtype)
    offset = offset.contiguous()
    d_min, min_dist = torch.empty(m, dtype=D.dtype), torch.empty(m, dtype=D.dtype)
    labels = torch.empty(m, dtype=torch.long)
    counts = None if threshold is None else torch.empty(m, dtype=torch.int32)
    getattr(lib, f"row_minima_{_SUFFIX[D.dtype]}")(
        D.data_ptr(),
        m,
        k,
        D.stride(0),
        offset.data_ptr(),
        0.0 if threshold is None else threshold,
        d_min.data_ptr(),
        labels.data_ptr(),
        min_dist.data_ptr(),
        None if counts is None else counts.data_ptr(),
    )
    return d_min, min_dist, labels, counts


def entmax15_rows(
    z: torch.Tensor,
    sigma: float,
    q: torch.Tensor,
    spent: torch.Tensor,
    tsallis: torch.Tensor,
    support: torch.Tensor,
) -> bool:
    """entmax15 of the rows of scores ``z`` into ``q`` (which may be ``z`` itself), with
    each row's ``-sigma sum_j q_j z_j``, Tsallis entropy ``(4/3)(1 - sum_j q_j^1.5)`` and
    support size (int32): the `entmax` package's exact threshold, one row at a time in C,
    found by a selection on the scores that can be in the support, without a sort.
    Returns ``False`` (nothing written) where the kernel is not there or the tensors are
    not CPU float32/float64 blocks with contiguous rows; the caller then uses the
    package."""
    blocks = (z, q)
    if any(t.device.type != "cpu" or t.dtype not in _SUFFIX or t.dim() != 2 for t in blocks):
        return False
    if z.dtype != q.dtype or any(t.shape[1] > 1 and t.stride(1) != 1 for t in blocks):
        return False
    if not all(t.is_contiguous() for t in (spent, tsallis, support)):
        return False
    lib = library()
    if lib is None:
        return False
    r, width = z.shape
    work = torch.empty(width, dtype=z.dtype)
    getattr(lib, f"entmax15_rows_{_SUFFIX[z.dtype]}")(
        z.data_ptr(),
        r,
        width,
        z.stride(0),
        sigma,
        q.data_ptr(),
        q.stride(0),
        spent.data_ptr(),
        tsallis.data_ptr(),
        support.data_ptr(),
        work.data_ptr(),
    )
    return True
