"""How much memory a fit takes, from its shape alone: an upper bound to check a job against
a worker's budget before it is queued.

The terms follow the fit's allocations: the fit's copy of ``X`` (and a centred copy when
the data are far from the origin), a few vectors per point (squared norms, nearest
distances, labels, Lloyd's bounds, and a local search trial's copies of them), the blocked
passes' buffers (:mod:`~rbfkm_engine.blocks`; twice as many columns while annealing, when
every centre has a twin, and more with ``overshoot``), the centres and their sums, the
local search's per-centre arrays, the fit of the cells annealing leaves with ``overshoot``
(:mod:`~rbfkm_engine.coarsen`), and the covariance when it is formed
(:func:`covariance_fits`). On several CPU threads every thread holds its own blocks and a
pass holds the M-step shares of a few blocks at a time (:mod:`~rbfkm_engine.parallel`).
Imports no torch: the service's API process uses it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .blocks import default_chunk_rows
from .overshoot import annealed_centres

_ITEMSIZE = {"float32": 4, "float64": 8}
#: ``(rows, columns)`` blocks a pass may hold at once: the reused distances and argmin keys,
#: the soft maps' candidates, scores and responsibilities, and the M-step's and spread's
#: weighted temporaries.
_BLOCK_BUFFERS = 8
#: ``(rows, d)`` temporaries a pass may hold at once: the M-step's scaled or gathered rows,
#: the local search's projections.
_ROW_BUFFERS = 3
#: Lanczos's ``d``-vectors (``eigsh``'s basis and work space) for the largest eigenvalue of
#: data wider than long, whose covariance is not formed.
_LANCZOS_VECTORS = 24
#: Entries of the ``k x k`` float64 arrays an annealed fit forms at once (two of them): the
#: merge test goes by blocks of rows of about this many (``twins.MERGE_BLOCK_ENTRIES``).
_PAIRWISE_ENTRIES = 1 << 22
#: Small arrays, libraries' work space and the allocator's slack, whatever the shape.
_FIXED = 8 << 20
#: ``(k, d)`` float64 arrays a fit may hold at once: the centres, their M-step sums, the
#: previous centres, the two halves of every cluster and the local search's candidates.
_CENTRE_ARRAYS = 8


def covariance_fits(n_samples: int, n_features: int) -> bool:
    """Whether the ``(d, d)`` covariance has no more entries than ``X``: a fit forms it only
    then; wider data get its largest eigenvalue from ``X`` itself, so no fit holds more
    than a small multiple of ``X``."""
    return n_features <= n_samples


@dataclass(frozen=True)
class FitMemory:
    """Bytes a fit may hold at its peak, by what holds them (an upper bound)."""

    data: int  # the fit's copies of X
    points: int  # vectors of one value per point
    blocks: int  # the blocked passes' buffers
    centres: int  # centres, sums and per-centre arrays
    covariance: int  # the (d, d) covariance, or Lanczos's vectors where it is not formed
    fixed: int = _FIXED  # what does not grow with the shape

    @property
    def total(self) -> int:
        parts = (self.data, self.points, self.blocks, self.centres, self.covariance)
        return sum(parts) + self.fixed


def fit_memory(
    n_samples: int,
    n_features: int,
    n_clusters: int,
    *,
    assignment: str = "entmax15",
    dtype: str = "float32",
    device: str = "cpu",
    threads: int = 1,
    overshoot: float = 1.0,
) -> FitMemory:
    """An upper bound of the memory ``RBFKMeans(n_clusters, assignment=..., dtype=...,
    device=..., overshoot=...).fit(X)`` allocates on its device for ``X`` of shape
    ``(n_samples, n_features)``, beyond ``X`` itself and the libraries. Every map is
    bounded alike: hard fits skip annealing but the bound does not count on it.
    ``threads``: the fit's CPU threads (``torch.get_num_threads()``)."""
    n, d, k = n_samples, n_features, n_clusters
    # The pool's threads and the caller's each hold blocks; the shares of up to two blocks
    # per thread wait to be added (see parallel.BlockPool.map).
    holders = 1 if threads <= 1 or device != "cpu" else threads + 1
    shares = 0 if holders == 1 else 2 * threads
    item = _ITEMSIZE[dtype]
    m = annealed_centres(k, overshoot)
    columns = _columns(m)
    rows = min(n, default_chunk_rows(k, d, item, device))
    annealed = assignment != "hard"
    cells = _cells_fit(m, d, k, device, threads) if annealed and m > k else 0
    return FitMemory(
        data=2 * n * d * item,  # converted to the compute dtype, then centred
        # norms, distances, saved distances, Hamerly's two bounds and their saved copy;
        # two label arrays
        points=n * (7 * item + 2 * 8),
        blocks=(_BLOCK_BUFFERS * columns + _ROW_BUFFERS * d) * rows * item * holders,
        centres=(_CENTRE_ARRAYS + shares) * m * d * 8
        + (2 * min(m * m, _PAIRWISE_ENTRIES) * 8 + cells) * annealed,
        covariance=_eigen_bytes(n, d) if annealed else 0,
    )


def _columns(centres: int) -> int:
    """Columns of a pass's ``(rows, columns)`` blocks against ``centres`` annealed centres:
    they and their twins; Lloyd pads to 16 columns."""
    return 2 * centres + 16


def _cells_fit(m: int, d: int, k: int, device: str, threads: int) -> int:
    """What the fit of ``m`` annealed cells to ``k`` centres holds beside the fit's own
    (:mod:`~rbfkm_engine.coarsen`): a fit of ``m`` float64 rows that does not anneal."""
    cells = fit_memory(m, d, k, assignment="hard", dtype="float64", device=device, threads=threads)
    return cells.total - cells.fixed


def gather_block_rows(chunk_rows: int, n_clusters: int, n_features: int) -> int:
    """Rows a block may take in a pass that holds only ``(rows, d)`` temporaries, no
    ``(rows, columns)`` block, within the room :func:`fit_memory` counts for a block of
    ``chunk_rows`` (the distance blocks' share goes to more rows)."""
    d = max(n_features, 1)
    room = (_BLOCK_BUFFERS * _columns(n_clusters) + _ROW_BUFFERS * d) * chunk_rows
    return max(chunk_rows, room // (_ROW_BUFFERS * d))


def _eigen_bytes(n: int, d: int) -> int:
    """What the largest eigenvalue of the covariance takes: the covariance itself, or
    Lanczos's vectors on data wider than long."""
    return d * d * 8 if covariance_fits(n, d) else _LANCZOS_VECTORS * d * 8
