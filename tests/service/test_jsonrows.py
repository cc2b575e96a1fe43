"""The streaming JSON dataset parser: the same answers as `json.load` and the row checks it
replaced (kept here as the oracle), error for error; and its memory, measured."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import service.jsonrows as jsonrows
from service.errors import InvalidDataset
from service.jsonrows import FLOAT32_MAX, NAME_MAX_LENGTH, json_float, json_int, quote
from service.uploads import JSON, check_array, parse

ROOT = Path(__file__).resolve().parents[2]


def _json_error(exc: ValueError) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return (
            f"the body is not valid JSON: {exc.msg.lower()} at line {exc.lineno - 1}, "
            f"column {exc.colno - 1} (character {exc.pos}; lines, columns and characters "
            "count from 0)"
        )
    if isinstance(exc, UnicodeDecodeError):
        return (
            f"the body is not valid JSON: byte {exc.start} is not {exc.encoding.upper()} text "
            "(bytes count from 0); send UTF-8"
        )
    return "the body is not valid JSON"


def oracle(path: Path) -> tuple[np.ndarray, str | None]:
    """The parser this one replaced (`json.load`, then a loop over the rows)."""
    try:
        with path.open("rb") as fh:
            body = json.load(fh, parse_int=json_int, parse_float=json_float)
    except RecursionError:
        raise InvalidDataset("the body is not valid JSON: it is nested too deeply") from None
    except ValueError as exc:
        raise InvalidDataset(_json_error(exc)) from None
    if not isinstance(body, dict) or "data" not in body:
        raise InvalidDataset('the JSON body must be an object {"data": [[...], ...], "name": ...}')
    unknown = sorted(set(body) - {"data", "name"})
    if unknown:
        raise InvalidDataset(
            f"unknown fields {unknown}; allowed: data, name", field=f"body.{unknown[0]}"
        )
    name = body.get("name")
    if name is not None and (type(name) is not str or len(name) > NAME_MAX_LENGTH):
        raise InvalidDataset(
            f"name must be a string of at most {NAME_MAX_LENGTH} characters", field="body.name"
        )
    rows = body["data"]
    if not isinstance(rows, list) or not rows:
        raise InvalidDataset("data must be a non-empty list of rows", field="body.data")
    width: int | None = None
    for i, row in enumerate(rows):
        if not isinstance(row, list):
            raise InvalidDataset(f"row {i} is not a list of numbers", field=f"body.data[{i}]")
        if width is None:
            width = len(row)
        elif len(row) != width:
            raise InvalidDataset(
                f"row {i} has {len(row)} values but row 0 has {width}; "
                "rows must be of equal length",
                field=f"body.data[{i}]",
            )
        for j, value in enumerate(row):
            if type(value) is jsonrows.OutOfRange:
                raise InvalidDataset(
                    f"row {i}, column {j} is {quote(value)}; values must lie within "
                    f"+-{FLOAT32_MAX:.3g}, the float32 range the workers fit in (k-means is "
                    "scale-invariant: scale the data); rows and columns count from 0",
                    field=f"body.data[{i}][{j}]",
                )
            if type(value) is not float and type(value) is not int:
                raise InvalidDataset(
                    f"row {i}, column {j} is {value!r}; values must be numbers",
                    field=f"body.data[{i}][{j}]",
                )
    return np.array(rows, dtype=np.float64), name


def outcome(fn: Any, path: Path) -> tuple[Any, ...]:
    """What a parser makes of a body: the array's bits and the name, or the error."""
    try:
        array, name = fn(path)
        check_array(array)
    except InvalidDataset as exc:
        return ("error", exc.detail, exc.field)
    return ("ok", array.shape, array.tobytes(), name)


def same(path: Path) -> None:
    expected, got = outcome(oracle, path), outcome(jsonrows.parse_json_rows, path)
    assert got == expected


NUMBERS = st.one_of(
    st.integers(-(10**6), 10**6).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.floats(-1e6, 1e6).map(lambda x: f"{x:.3e}"),
    st.sampled_from(["-0", "0", "-0.0", "1E+5", "2e-05", "9" * 38, "9" * 39, "-" + "9" * 40]),
    st.sampled_from(["1e999", "-1e400", "1e39", "3.5e38", "123456789012345678901234567890"]),
)
ODD = st.sampled_from(
    [
        '"2"',
        "null",
        "true",
        "[2]",
        "{}",
        "NaN",
        "Infinity",
        "-Infinity",
        "01",
        "1.",
        ".5",
        "+1",
        "1e",
        "--1",
        "1.2.3",
        "1e5e5",
        "1e5.5",
        "",
        " ",
        "0x10",
        "1 2",
        '"\\u00e9"',
        "é",
    ]
)
WS = st.sampled_from(["", " ", "\n", "\t", " \r\n "])


@st.composite
def bodies(draw: st.DrawFn) -> str:
    width = draw(st.integers(1, 4))
    n = draw(st.integers(0, 30))
    rows = []
    for _ in range(n):
        w = width if draw(st.integers(0, 20)) else draw(st.integers(0, 5))
        values = [draw(NUMBERS) if draw(st.integers(0, 30)) else draw(ODD) for _ in range(w)]
        sep = draw(WS) + "," + draw(WS)
        rows.append("[" + draw(WS) + sep.join(values) + draw(WS) + "]")
        if not draw(st.integers(0, 40)):
            rows[-1] = draw(ODD)
    data = "[" + ("," + draw(WS)).join(rows) + "]"
    fields = [f'"data":{draw(WS)}{data}']
    if draw(st.booleans()):
        fields.insert(draw(st.integers(0, 1)), '"name": ' + json.dumps(draw(st.text(max_size=5))))
    if not draw(st.integers(0, 10)):
        fields.append(draw(st.sampled_from(['"extra": [[1]]', '"data": [[5]]', '"name": 3'])))
    text = draw(WS) + "{" + ", ".join(fields) + "}" + draw(WS)
    if not draw(st.integers(0, 8)):  # damage it
        at = draw(st.integers(0, len(text)))
        text = (
            text[:at]
            + draw(st.sampled_from(["", "}", ",", "]", "x", "\n", '"']))
            + text[at + draw(st.integers(0, 3)) :]
        )
    return text


@pytest.fixture(params=[7, 64, jsonrows.WINDOW], ids=["window7", "window64", "window"])
def window(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Small windows, so that windows end in every possible place."""
    monkeypatch.setattr(jsonrows, "WINDOW", request.param)
    monkeypatch.setattr(jsonrows, "_READ", max(request.param // 2, 5))
    return int(request.param)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=bodies())
def test_the_same_answers_as_json_load(tmp_path: Path, window: int, body: str) -> None:
    path = tmp_path / "body.json"
    path.write_text(body, encoding="utf-8")
    same(path)


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[[1, 2]]",
        b'{"data": [[1, 2], [3]]}',
        b'{"data": [[1, 2], [3, 4], [5]], "name": "x"}',
        b'{"data": [[1, 1e999], [1]]}',
        b'{"data": [[1], [2, 3]], "name": 5}',
        b'{"data": [[1]]}\xff',
        b'\xef\xbb\xbf{"data": [[1]]}',
        '{"data": [[1]]}'.encode("utf-16"),
        b'{"data": [[1]], "name": "\xc3\xa9"} x',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"data": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        b'{"data": [[1, 2],\n [3, 4],\n [5 6]]}',
        b'{"data": [[-0, -0.0, 0]], "data": [[1, 2, 3]]}',
        b"",
        b"   ",
        b'{"data": [[1]]',
        b'{"data": [[1]], }',
        b'{"data": [[1],]}',
        b'{"data" [[1]]}',
    ],
)
def test_edge_bodies(tmp_path: Path, window: int, body: bytes) -> None:
    path = tmp_path / "body.json"
    path.write_bytes(body)
    same(path)


def large(rows: int, width: int, seed: int = 0) -> tuple[np.ndarray, str]:
    x = np.random.default_rng(seed).normal(scale=1e3, size=(rows, width))
    return x, json.dumps({"name": "big", "data": x.tolist()})


@pytest.mark.parametrize("fault", ["", '"7"', "NaN", "1e999", "[1, 2]", "-0", "1e39"])
def test_large_bodies_with_a_fault_deep_inside(tmp_path: Path, fault: str) -> None:
    x, text = large(20_000, 3)
    if fault:
        at = text.index("[", len(text) * 2 // 3)  # a row two thirds in
        end = text.index(",", at)
        text = text[: at + 1] + fault + text[end:]
    path = tmp_path / "body.json"
    path.write_text(text)
    same(path)
    if not fault:
        got = parse(path, JSON)
        np.testing.assert_array_equal(got.array, x)
        assert got.name == "big"


def test_ragged_rows_deep_inside_are_named(tmp_path: Path) -> None:
    rows = [[1.5, 2.5]] * 50_000
    rows[41_234] = [1.5]
    path = tmp_path / "body.json"
    path.write_text(json.dumps({"data": rows}))
    with pytest.raises(InvalidDataset) as info:
        parse(path, JSON)
    assert info.value.detail.startswith("row 41234 has 1 values but row 0 has 2")
    assert info.value.field == "body.data[41234]"


def test_the_vectorised_path_reads_exactly_what_float_reads() -> None:
    rng = np.random.default_rng(1)
    values = np.concatenate(
        [rng.normal(size=5000), rng.normal(size=5000) * 10.0 ** rng.integers(-300, 300, 5000)]
    )
    texts = [repr(float(v)) for v in values] + ["1E+5", "-0", "0e0", "123456789012345678"]
    body = ",".join(f"[{t}]" for t in texts) + ","
    taken = jsonrows._numeric_rows(body, None)
    assert taken is not None
    _, got, n_rows, width = taken
    assert (n_rows, width) == (len(texts), 1)
    expected = np.array([float(json_int(t) if t.lstrip("-").isdigit() else t) for t in texts])
    assert got.tobytes() == expected.tobytes()


MEMORY_PROBE = textwrap.dedent(
    """
    import json, resource, sys
    import numpy as np
    from pathlib import Path
    path = Path(sys.argv[1])
    rng = np.random.default_rng(0)
    with path.open("w") as fh:
        fh.write('{"name": "probe", "data": [')
        for block in range(50):
            x = rng.normal(size=(12_000, 8))
            fh.write(",".join(json.dumps(r) for r in x.tolist()))
            fh.write("," if block < 49 else "]}")
    from service.jsonrows import parse_json_rows
    import service.uploads  # imported before the baseline: its own memory is not the parse's
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    array, name = parse_json_rows(path)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(path.stat().st_size, after - before, array.nbytes, array.shape)
    """
)


def test_the_parse_of_a_50_mb_body_grows_memory_by_under_twice_its_size(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, str(tmp_path / "body.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    size, growth, nbytes, shape = result.stdout.split(maxsplit=3)
    assert shape.strip() == "(600000, 8)"
    assert int(size) > 45e6
    # The array itself (8 bytes a value) plus windows: well under 2x the body + 32 MiB.
    assert int(growth) < 2 * int(size) + 32 * 2**20, (size, growth, nbytes)
    assert int(growth) < int(nbytes) + 48 * 2**20, (size, growth, nbytes)
