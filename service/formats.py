"""Results as tables: Parquet or an Arrow IPC stream, chosen by the request's ``Accept``.

Data platforms read columns, not JSON lists, so the result routes also answer in the two
columnar formats they all load (pandas, Polars, Spark, DuckDB, Arrow). Each response is
one table that carries the row index explicitly, so a table read back in any order, or
filtered, still says which sample each value belongs to:

- labels: ``row`` (int64, the sample's index in the dataset), ``label`` (int64);
- centroids: ``cluster`` (int64), ``f0`` .. ``f{d-1}`` (the fit's float type);
- soft assignments: coordinate form, one row per non-zero weight: ``row`` (int64),
  ``cluster`` (int64), ``weight`` (float64), sorted by ``row`` then ``cluster``.

The fit's scalars (inertia, n_iter, ...) ride along as the schema's ``rbfkm`` metadata
(JSON), which Parquet keeps too.

:func:`negotiate` reads ``Accept`` (RFC 9110: quality values, wildcards) and raises
:class:`~service.errors.NotAcceptable` when the client takes none of the offered types;
the HTTP layer turns that into a ``406``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq
import scipy.sparse as sp
from rbfkm_client.media import ARROW_STREAM, PARQUET

from service.errors import NotAcceptable

#: The schema metadata key under which a table carries the fit's scalars (JSON).
METADATA_KEY = b"rbfkm"


def _ranges(accept: str) -> list[tuple[str, float, int]]:
    """The media ranges of an ``Accept`` header: (range, quality, position)."""
    found = []
    for position, item in enumerate(accept.split(",")):
        name, *params = (part.strip() for part in item.split(";"))
        quality = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        if name:
            found.append((name.lower(), quality, position))
    return found


def _match(media: str, ranges: list[tuple[str, float, int]]) -> tuple[float, int, int] | None:
    """(quality, specificity, -position) of the most specific range that covers ``media``."""
    kind = media.split("/")[0]
    best = None
    for name, quality, position in ranges:
        if name == media:
            specificity = 2
        elif name == f"{kind}/*":
            specificity = 1
        elif name == "*/*":
            specificity = 0
        else:
            continue
        if best is None or specificity > best[1]:
            best = (quality, specificity, -position)
    return best


def negotiate(accept: str | None, offered: Sequence[str]) -> str:
    """The offered media type the client prefers; the first offered for no ``Accept``.

    Highest quality first, then the most specific range (``application/x-npz`` over
    ``*/*``), then the client's order, then the order of ``offered``. NotAcceptable when
    every offered type is refused (quality 0) or not named.
    """
    if not accept or not accept.strip():
        return offered[0]
    ranges = _ranges(accept)
    scored = []
    for preference, media in enumerate(offered):
        match = _match(media, ranges)
        if match is not None and match[0] > 0:
            scored.append((match, -preference, media))
    if not scored:
        raise NotAcceptable(accept, offered)
    return max(scored)[2]


def _with_metadata(table: pa.Table, metadata: Mapping[str, Any] | None) -> pa.Table:
    if not metadata:
        return table
    return table.replace_schema_metadata({METADATA_KEY: json.dumps(dict(metadata))})


def labels_table(labels: np.ndarray, metadata: Mapping[str, Any] | None = None) -> pa.Table:
    """``row``, ``label``: one row per sample."""
    labels = np.asarray(labels, dtype=np.int64)
    table = pa.table({"row": np.arange(labels.shape[0], dtype=np.int64), "label": labels})
    return _with_metadata(table, metadata)


def centroids_table(centroids: np.ndarray, metadata: Mapping[str, Any] | None = None) -> pa.Table:
    """``cluster``, ``f0`` .. ``f{d-1}``: one row per centre."""
    centroids = np.asarray(centroids)
    columns: dict[str, Any] = {"cluster": np.arange(centroids.shape[0], dtype=np.int64)}
    columns.update({f"f{j}": centroids[:, j] for j in range(centroids.shape[1])})
    return _with_metadata(pa.table(columns), metadata)


def assignments_table(matrix: sp.spmatrix, metadata: Mapping[str, Any] | None = None) -> pa.Table:
    """``row``, ``cluster``, ``weight``: the non-zero soft assignments, row-major."""
    csr = sp.csr_matrix(matrix)
    csr.sort_indices()
    rows = np.repeat(np.arange(csr.shape[0], dtype=np.int64), np.diff(csr.indptr))
    table = pa.table(
        {
            "row": rows,
            "cluster": csr.indices.astype(np.int64),
            "weight": csr.data.astype(np.float64),
        }
    )
    shape = {"shape": [int(csr.shape[0]), int(csr.shape[1])]}
    return _with_metadata(table, {**shape, **(metadata or {})})


def encode(table: pa.Table, media: str) -> bytes:
    """The bytes of ``table`` as ``media`` (one of :data:`TABLE_TYPES`)."""
    sink = io.BytesIO()
    if media == PARQUET:
        pq.write_table(table, sink)
    elif media == ARROW_STREAM:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    else:
        raise ValueError(f"not a table media type: {media!r}")
    return sink.getvalue()
