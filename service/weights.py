"""Sample weights of a dataset: a column of the upload, stored beside its array.

``weight_column`` on upload names one column of a CSV with a header row or of a Parquet
file, or, for data without column names (a ``.npy`` array, JSON rows, a CSV without a
header), gives its 0-based index. That column is taken out of the features and kept as
the dataset's sample weights (``{data_dir}/datasets/{id}.weights.npy``), which every fit
on the dataset then uses (a weight counts as that many repeats of its row).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from service.errors import InvalidDataset
from service.uploads import Parsed


def take_weight_column(parsed: Parsed, column: str) -> tuple[Parsed, np.ndarray]:
    """The upload without its column ``column``, and that column as float64 weights;
    InvalidDataset when the upload has no such column or the weights are unusable."""
    j = _column_index(parsed, column)
    if parsed.array.shape[1] < 2:
        raise InvalidDataset(
            "the weight column is the only column: the data need at least one feature",
            field="query.weight_column",
        )
    weights = np.array(parsed.array[:, j], dtype=np.float64)
    negative = np.flatnonzero(weights < 0)
    if negative.size:
        raise InvalidDataset(
            f"row {int(negative[0])}: weight {weights[negative[0]]} is negative; weights "
            "must be >= 0",
            field=f"body.{column}[{int(negative[0])}]",
        )
    if not weights.sum() > 0:
        raise InvalidDataset("every weight is 0; at least one must be > 0", field=f"body.{column}")
    features = np.ascontiguousarray(np.delete(parsed.array, j, axis=1))
    columns = None if parsed.columns is None else [c for c in parsed.columns if c != column]
    return dataclasses.replace(parsed, array=features, columns=columns, in_place=False), weights


def _column_index(parsed: Parsed, column: str) -> int:
    """The index of the weight column: by name when the upload names its columns, else
    ``column`` read as a 0-based index."""
    if parsed.columns is not None:
        if column not in parsed.columns:
            raise InvalidDataset(
                f"weight_column={column!r} names no column; the columns are {parsed.columns}",
                field="query.weight_column",
            )
        return parsed.columns.index(column)
    width = parsed.array.shape[1]
    if not (column.isascii() and column.isdigit() and int(column) < width):
        raise InvalidDataset(
            f"weight_column={column!r}: this upload has no column names (a .npy array, JSON "
            f"rows or a CSV without a header row), so give the column's 0-based index, "
            f"0 to {width - 1}; or send a CSV with a header row or a Parquet file to name it",
            field="query.weight_column",
        )
    return int(column)


def weights_path(dataset_path: Path) -> Path:
    """Where the weights of the dataset stored at ``dataset_path`` live."""
    return dataset_path.with_name(f"{dataset_path.stem}.weights.npy")


def load_weights(dataset_path: Path) -> np.ndarray | None:
    """The dataset's sample weights, ``None`` when it has none."""
    path = weights_path(dataset_path)
    return np.load(path) if path.is_file() else None
