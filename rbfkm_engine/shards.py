"""Shard files of a batch fit: which rank reads which, how they are read and written.

A data set is a sorted list of files (``.npy``, or ``.parquet`` with numeric columns),
each a block of rows. Rank ``r`` of ``world`` reads a contiguous run of them (``r``-th of
``world`` runs as even as the file count allows; a rank may get none, an empty shard), so
the ranks' shards in rank order are the files in sorted order. A lone ``.npy`` file is
memory-mapped, not read: a shard larger than memory is fitted where it lies.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: The file types a shard may be.
SUFFIXES = (".npy", ".parquet")


@dataclass(frozen=True)
class Shard:
    """One rank's rows: the array (memory-mapped for a lone ``.npy``), and the files it
    came from with their row counts, in order."""

    X: np.ndarray
    files: list[Path]
    rows: list[int]


def shard_files(pattern: str) -> list[Path]:
    """The files matching ``pattern`` (a glob), sorted; ``ValueError`` naming what is wrong
    when there are none or some have another type."""
    files = sorted(Path(p) for p in glob.glob(pattern, recursive=True))
    if not files:
        raise ValueError(f"no shard files match {pattern!r}")
    others = [str(f) for f in files if f.suffix not in SUFFIXES]
    if others:
        raise ValueError(f"shard files must be {' or '.join(SUFFIXES)}; got {others[:3]}")
    return files


def files_of_rank(files: list[Path], rank: int, world: int) -> list[Path]:
    """Rank ``rank``'s contiguous run of ``files`` (empty when there are fewer files than
    ranks)."""
    start = rank * len(files) // world
    return files[start : (rank + 1) * len(files) // world]


def n_features(path: Path) -> int:
    """The number of columns of a shard file, from its header alone."""
    if path.suffix == ".npy":
        return int(np.load(path, mmap_mode="r").shape[1])
    import pyarrow.parquet as pq

    return len(pq.read_schema(path).names)


def read_shard(files: list[Path], features: int) -> Shard:
    """A rank's rows: ``(0, features)`` without files, a lone ``.npy`` memory-mapped, else
    the files read and stacked."""
    if not files:
        return Shard(np.empty((0, features), dtype=np.float32), [], [])
    arrays = [_read(path) for path in files]
    for path, array in zip(files, arrays, strict=True):
        if array.ndim != 2 or array.shape[1] != features:
            raise ValueError(
                f"{path} has shape {array.shape}; every shard file needs {features} columns"
            )
    X = arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
    return Shard(X, list(files), [a.shape[0] for a in arrays])


def _read(path: Path) -> np.ndarray:
    """One shard file as an array (a ``.npy`` memory-mapped)."""
    if path.suffix == ".npy":
        return np.load(path, mmap_mode="r")
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    return np.column_stack([c.to_numpy(zero_copy_only=False) for c in table.columns])


def write_labels(labels: np.ndarray, shard: Shard, out: Path, fmt: str) -> list[Path]:
    """Each of the shard's files' labels as ``out/<file stem>.labels.<fmt>`` (``npy`` or
    ``parquet``, one int64 column ``label``); returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written, start = [], 0
    for path, rows in zip(shard.files, shard.rows, strict=True):
        target = out / f"{path.stem}.labels.{fmt}"
        write_array(labels[start : start + rows], target, ["label"])
        written.append(target)
        start += rows
    return written


def write_array(array: np.ndarray, target: Path, columns: list[str]) -> None:
    """``array`` (1D, or 2D with ``columns``) to ``target`` as ``.npy`` or ``.parquet``,
    written under a temporary name and renamed, so a reader never sees half a file."""
    partial = target.with_name(target.name + ".partial")
    if target.suffix == ".npy":
        with open(partial, "wb") as f:
            np.save(f, array)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = array.reshape(array.shape[0], len(columns))
        pq.write_table(pa.table({n: table[:, j] for j, n in enumerate(columns)}), partial)
    partial.replace(target)
