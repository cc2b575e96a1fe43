"""Domain errors carry what a caller needs (detail, field, short message), and no HTTP."""

from __future__ import annotations

import pytest

from service import errors
from service.errors import (
    BodyTooLarge,
    DatasetNotFound,
    InvalidDataset,
    ResultNotFound,
    ServiceError,
    UnsupportedMediaType,
)


def test_a_domain_error_says_what_where_and_in_short() -> None:
    exc = ServiceError("the long story", field="body.x", message="short")
    assert (str(exc), exc.detail, exc.field, exc.message) == (
        "the long story",
        "the long story",
        "body.x",
        "short",
    )
    assert ServiceError("only a detail").message == "only a detail"


def test_the_concrete_errors() -> None:
    assert InvalidDataset("row 1 is short", "body.data[1]").field == "body.data[1]"
    assert InvalidDataset("empty").field == "body"
    assert UnsupportedMediaType("send CSV").field == "header.content-type"
    too_large = BodyTooLarge(5)
    assert "5 bytes" in str(too_large) and too_large.message == "larger than 5 bytes"
    assert str(DatasetNotFound("d1")) == "dataset 'd1' not found"
    assert str(ResultNotFound("j1")) == "no result for job 'j1'"


def test_lookups_stay_lookups() -> None:
    with pytest.raises(LookupError):
        raise DatasetNotFound("d")
    with pytest.raises(KeyError):
        raise ResultNotFound("j")


def test_no_http_in_the_domain() -> None:
    source = errors.__loader__.get_source(errors.__name__)  # type: ignore[union-attr]
    assert "fastapi" not in source and "status_code" not in source
