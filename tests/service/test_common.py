"""The shared helpers: safe ids, timestamps, Redis replies, JSON numbers."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone

import numpy as np
import pytest

from service.common import is_safe_id, json_number, jsonable, now_stamps, text, utc_now


@pytest.mark.parametrize("ident", ["a", "5b0c6f0a7c1e4a8e", "job-1_x.v2", "A" * 128])
def test_safe_ids(ident: str) -> None:
    assert is_safe_id(ident)


@pytest.mark.parametrize("ident", ["", ".", "..", "../x", "a/b", ".hidden", "-x", "A" * 129])
def test_ids_that_could_escape_or_hide_are_refused(ident: str) -> None:
    assert not is_safe_id(ident)


def test_now_stamps_are_one_moment_in_two_forms() -> None:
    iso, score = now_stamps()
    moment = datetime.fromisoformat(iso)
    assert moment.tzinfo is not None and moment.utcoffset().total_seconds() == 0
    assert abs(moment.timestamp() - float(score)) < 1e-3
    assert utc_now().tzinfo == timezone.utc


def test_text_decodes_bytes_only() -> None:
    assert text(b"queued") == "queued" and text("x") == "x" and text(None) is None


def test_json_numbers() -> None:
    assert json_number(None) is None
    assert json_number(3) == 3 and isinstance(json_number(np.int64(3)), int)
    assert json_number(np.float32(0.5)) == 0.5
    assert json_number(math.nan) is None and json_number(-math.inf) is None


def test_jsonable_unwraps_numpy_and_drops_non_finite() -> None:
    value = {"a": np.array([1.0, np.inf]), 2: (np.bool_(True), np.int32(4)), "s": "x"}
    assert jsonable(value) == {"a": [1.0, None], "2": [True, 4], "s": "x"}
    json.dumps(jsonable(value), allow_nan=False)
