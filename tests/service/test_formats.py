"""Result tables and content negotiation (:mod:`service.formats`)."""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from service.errors import NotAcceptable
from service.formats import (
    ARROW_STREAM,
    METADATA_KEY,
    assignments_table,
    centroids_table,
    encode,
    labels_table,
    negotiate,
)
from service.uploads import JSON, PARQUET

OFFERED = (JSON, "application/x-npz", PARQUET, ARROW_STREAM)


@pytest.mark.parametrize(
    ("accept", "chosen"),
    [
        (None, JSON),
        ("", JSON),
        ("*/*", JSON),
        ("application/*", JSON),
        ("text/html,application/xhtml+xml,*/*;q=0.8", JSON),
        (PARQUET, PARQUET),
        (f"{ARROW_STREAM}, */*;q=0.1", ARROW_STREAM),
        ("application/x-npz, */*", "application/x-npz"),
        (f"{JSON};q=0.5, {PARQUET}", PARQUET),
        (f"{PARQUET}, {ARROW_STREAM}", PARQUET),
        (f"{ARROW_STREAM}, {PARQUET}", ARROW_STREAM),
        ("APPLICATION/VND.APACHE.PARQUET ; q=0.9", PARQUET),
        (f"*/*;q=0.2, {JSON};q=0", "application/x-npz"),
    ],
)
def test_negotiate_picks_the_preferred_offered_type(accept: str | None, chosen: str) -> None:
    assert negotiate(accept, OFFERED) == chosen


@pytest.mark.parametrize("accept", ["text/csv", "image/*", f"{PARQUET};q=0", "application/xml"])
def test_negotiate_refuses_what_it_cannot_send(accept: str) -> None:
    with pytest.raises(NotAcceptable) as raised:
        negotiate(accept, (JSON, PARQUET))
    assert raised.value.field == "header.accept"
    assert PARQUET in raised.value.detail and accept in raised.value.detail


def _read(data: bytes, media: str) -> pa.Table:
    if media == PARQUET:
        return pq.read_table(io.BytesIO(data))
    return pa.ipc.open_stream(io.BytesIO(data)).read_all()


@pytest.mark.parametrize("media", [PARQUET, ARROW_STREAM])
def test_labels_round_trip_with_their_row_index(media: str) -> None:
    labels = np.array([2, 0, 1, 1], dtype=np.int64)
    table = _read(encode(labels_table(labels, {"inertia": 1.5}), media), media)
    assert table.column_names == ["row", "label"]
    assert table["row"].to_pylist() == [0, 1, 2, 3]
    assert table["label"].to_pylist() == [2, 0, 1, 1]
    assert json.loads(table.schema.metadata[METADATA_KEY]) == {"inertia": 1.5}


@pytest.mark.parametrize("media", [PARQUET, ARROW_STREAM])
def test_centroids_are_one_column_a_feature(media: str) -> None:
    centroids = np.arange(6, dtype=np.float32).reshape(2, 3)
    table = _read(encode(centroids_table(centroids), media), media)
    assert table.column_names == ["cluster", "f0", "f1", "f2"]
    assert table.schema.field("f0").type == pa.float32()
    assert np.array_equal(np.column_stack([table[f"f{j}"] for j in range(3)]), centroids)


def test_assignments_are_the_non_zeros_in_coordinate_form() -> None:
    matrix = sp.csr_matrix(np.array([[0.0, 1.0], [0.25, 0.75], [0.0, 0.0]]))
    table = _read(encode(assignments_table(matrix), PARQUET), PARQUET)
    assert table.column_names == ["row", "cluster", "weight"]
    back = sp.coo_matrix(
        (table["weight"].to_numpy(), (table["row"].to_numpy(), table["cluster"].to_numpy())),
        shape=tuple(json.loads(table.schema.metadata[METADATA_KEY])["shape"]),
    )
    assert back.shape == (3, 2)
    assert np.array_equal(back.toarray(), matrix.toarray())


def test_encode_refuses_other_types() -> None:
    with pytest.raises(ValueError, match="not a table"):
        encode(labels_table(np.zeros(1)), JSON)
