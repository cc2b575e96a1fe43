"""The JSON dataset body `{"data": [[...], ...], "name": ...}`, parsed in bounded memory.

A streaming parser over the spooled file: the body is decoded a window at a time, the rows
go straight into one preallocated float64 array (its capacity from a first pass that
counts commas, so the peak is that array plus a window, never Python lists of floats), and
nothing is held but the window and the array. Its answers are those of ``json.load`` and
the row checks it replaced, error for error: the grammar mirrors ``json.decoder``'s (the
same messages at the same positions: lines, columns and characters from 0), every value
that is not a row of numbers goes through the stdlib's own scanner, and the first bad row
or value (ragged, not a list, not a number, beyond float32) is the one reported, after the
whole body has proved to be JSON, as ``json.load`` did.

Runs of well-formed numeric rows, the bulk of any real body, take a vectorised path:
numpy classifies a window of up to :data:`WINDOW` characters, checks the JSON grammar of
its rows and numbers, their widths and ranges, and converts them in one call; anything
it does not vouch for (a string, NaN, a ragged row, a number beyond float32) is left to
the exact path. Each window is a short stretch of work, so a parse in a thread leaves the
event loop its turns (the GIL is never held for long).
"""

from __future__ import annotations

import codecs
import json
import json.decoder
import json.scanner
import re
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from service.errors import InvalidDataset

#: Values beyond this (float32's largest) would not survive the workers' float32 fit.
FLOAT32_MAX = float(np.finfo(np.float32).max)
#: The longest dataset name (JSON ``name``, ``?name=``).
NAME_MAX_LENGTH = 200
#: Digits of the longest integer a JSON body may hold (float32 holds at most 3.4e38).
MAX_INT_DIGITS = 39
#: How much of an offending value an error message quotes.
QUOTE = 40
#: Characters the vectorised path takes at a time (a few milliseconds of work).
WINDOW = 1 << 19
#: Bytes read from the file at a time.
_READ = 1 << 20
_WS = " \t\n\r"
_WS_RUN = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_SPACES = str.maketrans("[],", "   ")


def quote(text: str) -> str:
    """A value as an error message quotes it: repr, cut to a readable length."""
    return repr(text if len(text) <= QUOTE else text[:QUOTE] + "...")


class OutOfRange(str):
    """A JSON number too large for float32 (kept as its text, to name it in the error)."""


def json_int(text: str) -> int | OutOfRange:
    # Python refuses to convert integers of over 4300 digits (and a float would be inf):
    # anything beyond float32's range is refused with its place instead.
    return int(text) if len(text.lstrip("-")) <= MAX_INT_DIGITS else OutOfRange(text)


def json_float(text: str) -> float | OutOfRange:
    value = float(text)  # "1e999" is inf here; JSON's own Infinity goes to parse_constant
    return OutOfRange(text) if value in (np.inf, -np.inf) else value


def not_utf(exc: UnicodeDecodeError, offset: int = 0) -> str:
    """The message of a body whose bytes are not text in its encoding (bytes from 0)."""
    return (
        f"the body is not valid JSON: byte {offset + exc.start} is not "
        f"{exc.encoding.upper()} text (bytes count from 0); send UTF-8"
    )


def out_of_range(row: int, col: int, text: str) -> InvalidDataset:
    return InvalidDataset(
        f"row {row}, column {col} is {quote(text)}; values must lie within "
        f"+-{FLOAT32_MAX:.3g}, the float32 range the workers fit in (k-means is "
        "scale-invariant: scale the data); rows and columns count from 0",
        field=f"body.data[{row}][{col}]",
    )


_DECODER = json.JSONDecoder(parse_int=json_int, parse_float=json_float)
_SCAN = json.scanner.make_scanner(_DECODER)


@dataclass
class _Rows:
    """The rows of one JSON array: where its values go and the first bad row or value
    (as the old loop found it: a ragged row before its values, values in order)."""

    out: np.ndarray | None  # None: validate only (an array that is not `data`)
    count: int = 0
    n_rows: int = 0
    width: int | None = None
    error: InvalidDataset | None = None

    def store(self, values: np.ndarray | list[float]) -> None:
        if self.out is not None and self.error is None:
            self.out[self.count : self.count + len(values)] = values
            self.count += len(values)

    def row(self, i: int, values: list[Any]) -> None:
        """Check a row read by the exact path and store it."""
        if self.error is not None:
            return
        if self.width is None:
            self.width = len(values)
        elif len(values) != self.width:
            self.error = InvalidDataset(
                f"row {i} has {len(values)} values but row 0 has {self.width}; "
                "rows must be of equal length",
                field=f"body.data[{i}]",
            )
            return
        for j, value in enumerate(values):
            if type(value) is OutOfRange:
                self.error = out_of_range(i, j, value)
                return
            if type(value) is not float and type(value) is not int:
                self.error = InvalidDataset(
                    f"row {i}, column {j} is {value!r}; values must be numbers",
                    field=f"body.data[{i}][{j}]",
                )
                return
        self.store([float(v) for v in values])


class _Parser:
    """One pass over the decoded body: ``text`` is a window of it starting at character
    ``base``; ``lines`` newlines (the last at ``last_nl``) lie before the window."""

    def __init__(self, fh: IO[bytes], encoding: str, capacity: int) -> None:
        self.fh = fh
        self.decoder = codecs.getincrementaldecoder(encoding)("surrogatepass")
        self.text = ""
        self.base = 0
        self.lines = 0
        self.last_nl = -1
        self.eof = False
        self.capacity = capacity
        self.fast_skip = 0  # elements to read exactly before the vectorised path tries again
        self.fast_backoff = 8

    # ---- the window --------------------------------------------------------------------

    def fill(self, pos: int, need: int) -> int:
        """Make ``need`` characters from ``pos`` available (fewer at the end of the body);
        drops what lies before ``pos``; returns ``pos`` in the new window."""
        if len(self.text) - pos >= need or self.eof:
            return pos
        dropped = self.text[:pos]
        newlines = dropped.count("\n")
        if newlines:
            self.lines += newlines
            self.last_nl = self.base + dropped.rfind("\n")
        self.base += pos
        parts = [self.text[pos:]]
        have = len(parts[0])
        while have < need and not self.eof:
            raw = self.fh.read(max(_READ, need - have))
            self.eof = not raw
            part = self.decoder.decode(raw, final=self.eof)
            parts.append(part)
            have += len(part)
        self.text = "".join(parts)
        return 0

    def error(self, msg: str, pos: int) -> InvalidDataset:
        """A syntax error at ``pos`` of the window, as ``json`` words and places it."""
        last = self.text.rfind("\n", 0, pos)
        line = self.lines + self.text.count("\n", 0, pos)
        column = pos - last - 1 if last >= 0 else self.base + pos - self.last_nl - 1
        return InvalidDataset(
            f"the body is not valid JSON: {msg.lower()} at line {line}, column {column} "
            f"(character {self.base + pos}; lines, columns and characters count from 0)"
        )

    def ws(self, pos: int) -> int:
        """The first non-whitespace position from ``pos``."""
        while True:
            end = _WS_RUN.match(self.text, pos).end()
            if end < len(self.text) or self.eof:
                return end
            pos = self.fill(end, WINDOW)

    def peek(self, pos: int) -> tuple[str, int]:
        pos = self.fill(pos, 1)
        return self.text[pos : pos + 1], pos

    def value(self, pos: int) -> tuple[Any, int]:
        """One JSON value at ``pos`` by the stdlib scanner, reading on while the window
        ends inside it."""
        need = 64
        while True:
            pos = self.fill(pos, need)
            try:
                value, end = _SCAN(self.text, pos)
                if end < len(self.text) or self.eof:
                    return value, end
            except StopIteration as stop:  # final unless "-Infinity" may be cut short
                if self.eof or stop.value + 16 <= len(self.text):
                    raise self.error("Expecting value", stop.value) from None
            except json.JSONDecodeError as exc:
                # Final unless the window may have cut the value short: read on for a
                # string without its end, or an error near the end of the window.
                cut = exc.msg.startswith("Unterminated") or exc.pos + 64 >= len(self.text)
                if self.eof or not cut:
                    raise self.error(exc.msg, exc.pos) from None
            except RecursionError:
                raise InvalidDataset(
                    "the body is not valid JSON: it is nested too deeply"
                ) from None
            need = 2 * max(need, len(self.text) - pos)

    def after_item(self, pos: int, close: str) -> tuple[bool, int]:
        """Past the whitespace and the ``,`` or ``close`` after an item: whether it closed."""
        pos = self.ws(pos)
        char, pos = self.peek(pos)
        if char == close:
            return True, pos + 1
        if char != ",":
            raise self.error("Expecting ',' delimiter", pos)
        return False, pos + 1

    # ---- the document ------------------------------------------------------------------

    def document(self) -> tuple[np.ndarray, str | None]:
        pos = self.ws(0)
        char, pos = self.peek(pos)
        if char == "{":
            fields, pos = self.object(pos + 1)
        elif char == "[":
            pos = self.rows(pos + 1, _Rows(None))
            fields = None
        else:
            _, pos = self.value(pos)
            fields = None
        pos = self.ws(pos)
        if pos < len(self.text):
            raise self.error("Extra data", pos)
        if fields is None or "data" not in fields:
            raise InvalidDataset(
                'the JSON body must be an object {"data": [[...], ...], "name": ...}'
            )
        unknown = sorted(set(fields) - {"data", "name"})
        if unknown:
            raise InvalidDataset(
                f"unknown fields {unknown}; allowed: data, name", field=f"body.{unknown[0]}"
            )
        name = fields.get("name")
        if name is not None and (type(name) is not str or len(name) > NAME_MAX_LENGTH):
            raise InvalidDataset(
                f"name must be a string of at most {NAME_MAX_LENGTH} characters",
                field="body.name",
            )
        rows = fields["data"]
        if not isinstance(rows, _Rows) or rows.n_rows == 0:
            raise InvalidDataset("data must be a non-empty list of rows", field="body.data")
        if rows.error is not None:
            raise rows.error
        assert rows.out is not None
        width = rows.width or 0
        return rows.out[: rows.count].reshape(rows.n_rows, width), name

    def object(self, pos: int) -> tuple[dict[str, Any], int]:
        """The top-level object (``json.decoder.JSONObject``'s grammar): its fields, `data`
        as a :class:`_Rows` when it is an array."""
        fields: dict[str, Any] = {}
        pos = self.ws(pos)
        char, pos = self.peek(pos)
        if char == "}":
            return fields, pos + 1
        if char != '"':
            raise self.error("Expecting property name enclosed in double quotes", pos)
        while True:
            key, pos = self.value(pos)  # a string: the scanner reads it whole
            pos = self.ws(pos)
            char, pos = self.peek(pos)
            if char != ":":
                raise self.error("Expecting ':' delimiter", pos)
            pos = self.ws(pos + 1)
            char, pos = self.peek(pos)
            if char == "[":
                rows = _Rows(np.empty(self.capacity) if key == "data" else None)
                fields.pop(key, None)  # a repeated key: the last one counts, as in json
                pos = self.rows(pos + 1, rows)
                fields[key] = rows
            else:
                fields[key], pos = self.value(pos)
            closed, pos = self.after_item(pos, "}")
            if closed:
                return fields, pos
            pos = self.ws(pos)
            char, pos = self.peek(pos)
            if char != '"':
                raise self.error("Expecting property name enclosed in double quotes", pos)

    def rows(self, pos: int, rows: _Rows) -> int:
        """An array of rows (``JSONArray``'s grammar), after its ``[``."""
        pos = self.ws(pos)
        char, pos = self.peek(pos)
        if char == "]":
            return pos + 1
        while True:
            pos = self.fast(pos, rows)
            char, pos = self.peek(pos)
            if char == "[":
                pos = self.row(pos + 1, rows)
            else:
                _, pos = self.value(pos)
                if rows.error is None:
                    rows.error = InvalidDataset(
                        f"row {rows.n_rows} is not a list of numbers",
                        field=f"body.data[{rows.n_rows}]",
                    )
                rows.n_rows += 1
            closed, pos = self.after_item(pos, "]")
            if closed:
                return pos
            pos = self.ws(pos)

    def row(self, pos: int, rows: _Rows) -> int:
        """One row, after its ``[``: its values by the stdlib scanner."""
        values: list[Any] = []
        pos = self.ws(pos)
        char, pos = self.peek(pos)
        if char != "]":
            while True:
                value, pos = self.value(pos)
                values.append(value)
                closed, pos = self.after_item(pos, "]")
                if closed:
                    break
                pos = self.ws(pos)
        else:
            pos += 1
        rows.row(rows.n_rows, values)
        rows.n_rows += 1
        return pos

    # ---- the vectorised path -------------------------------------------------------------

    def fast(self, pos: int, rows: _Rows) -> int:
        """Read the run of well-formed numeric rows at ``pos`` (each followed by a comma)
        in one go; returns where it stopped (``pos`` if it vouched for nothing)."""
        if rows.out is None or rows.error is not None:
            return pos
        if self.fast_skip:
            self.fast_skip -= 1
            return pos
        pos = self.fill(pos, WINDOW)
        taken = _numeric_rows(self.text[pos : pos + WINDOW], rows.width)
        if taken is None:
            self.fast_skip = self.fast_backoff  # back off: exact reads until it tries again
            self.fast_backoff = min(2 * self.fast_backoff, 4096)
            return pos
        self.fast_backoff = 8
        length, values, n_rows, width = taken
        rows.store(values)
        rows.n_rows += n_rows
        rows.width = width
        return self.ws(pos + length)


#: Byte classes of the vectorised path: 0 whitespace, 1 number, 2 `[`, 3 `]`, 4 `,`, 5 other.
_CLASS = np.full(256, 5, dtype=np.uint8)
_CLASS[[ord(c) for c in _WS]] = 0
_CLASS[[ord(c) for c in "0123456789+-.eE"]] = 1
_CLASS[ord("[")], _CLASS[ord("]")], _CLASS[ord(",")] = 2, 3, 4
#: Event codes: a row's `[`, a number, a comma in a row, a row's `]`, a comma between rows.
_OPEN, _NUM, _IN, _CLOSE, _BETWEEN, _BAD = range(6)
_ALLOWED = np.zeros((6, 6), dtype=bool)
for _prev, _next in [
    (_BETWEEN, _OPEN),
    (_OPEN, _NUM),
    (_NUM, _IN),
    (_NUM, _CLOSE),
    (_IN, _NUM),
    (_CLOSE, _BETWEEN),
]:
    _ALLOWED[_prev, _next] = True


def _shift(a: np.ndarray, by: int, fill: Any) -> np.ndarray:
    """``a`` moved ``by`` places to the right (left when negative), ``fill`` let in."""
    out = np.empty_like(a)
    if by > 0:
        out[:by], out[by:] = fill, a[:-by]
    else:
        out[by:], out[:by] = fill, a[-by:]
    return out


def _bad_numbers(b: np.ndarray, num: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Positions of bytes that break the JSON number grammar
    ``-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][-+]?[0-9]+)?`` of their token (``num``: number
    bytes, ``start``: the first byte of each token)."""
    digit = (b >= 48) & (b <= 57)
    minus, plus, dot = b == 45, b == 43, b == 46
    exp = (b == 101) | (b == 69)
    prev_digit, prev_exp = _shift(digit, 1, False), _shift(exp, 1, False)
    next_digit = _shift(digit, -1, False)
    bad = minus & ~(start | prev_exp)
    bad |= (minus | plus) & ~next_digit
    bad |= plus & ~prev_exp
    bad |= dot & ~(prev_digit & next_digit)
    bad |= exp & ~(prev_digit & (next_digit | _shift(minus | plus, -1, False)))
    leading = start | _shift(minus & start, 1, False)  # the first digit of the integer part
    bad |= (b == 48) & leading & next_digit
    found = [np.flatnonzero(bad)]
    # At most one `.` and one exponent in a token, the `.` before the exponent.
    starts = np.flatnonzero(start)
    dots, exps = np.flatnonzero(dot), np.flatnonzero(exp)
    dot_token = np.searchsorted(starts, dots, side="right")
    exp_token = np.searchsorted(starts, exps, side="right")
    found.append(dots[1:][np.diff(dot_token) == 0])
    found.append(exps[1:][np.diff(exp_token) == 0])
    if len(dots) and len(exps):
        before = np.searchsorted(exps, dots) - 1  # the last exponent before each `.`
        same = (before >= 0) & (exp_token[np.maximum(before, 0)] == dot_token)
        found.append(dots[same])
    return np.concatenate(found)


def _numeric_rows(window: str, width: int | None) -> tuple[int, np.ndarray, int, int] | None:
    """The longest run of complete numeric rows, each followed by a comma, at the start of
    ``window`` that the exact path would read to the same values without a complaint:
    (characters taken, values, rows, width), or None for none."""
    end = window.rfind(",")
    if end < 0:
        return None
    if not window.isascii():
        bad = _NON_ASCII.search(window)
        assert bad is not None
        end = window.rfind(",", 0, bad.start())
        if end < 0:
            return None
    text = window[: end + 1]
    b = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    cls = _CLASS[b]
    other = np.flatnonzero(cls == 5)
    if len(other):
        end = text.rfind(",", 0, int(other[0]))
        if end < 0:
            return None
        text, b, cls = text[: end + 1], b[: end + 1], cls[: end + 1]
    num = cls == 1
    start = num & ~_shift(num, 1, False)
    events = np.flatnonzero(start | (cls >= 2))
    kind = cls[events]
    step = (kind == 2).astype(np.int64) - (kind == 3)
    depth = np.cumsum(step) + 1 - step  # before each event; 1 between rows
    code = np.full(len(events), _BAD, dtype=np.int64)
    code[(kind == 2) & (depth == 1)] = _OPEN
    code[(kind == 1) & (depth == 2)] = _NUM
    code[(kind == 4) & (depth == 2)] = _IN
    code[(kind == 3) & (depth == 2)] = _CLOSE
    code[(kind == 4) & (depth == 1)] = _BETWEEN
    ok = _ALLOWED[_shift(code, 1, _BETWEEN), code]
    bad_bytes = _bad_numbers(b, num, start)
    limit = len(events)
    wrong = np.flatnonzero(~ok)
    if len(wrong):
        limit = int(wrong[0])
    if len(bad_bytes):
        first = int(bad_bytes.min())
        limit = min(limit, int(np.searchsorted(events, first, side="right")) - 1)
    between = np.flatnonzero(code[:limit] == _BETWEEN)
    if not len(between):
        return None
    last = int(between[-1])
    opens = np.flatnonzero(code[:last] == _OPEN)
    closes = np.flatnonzero(code[:last] == _CLOSE)
    widths = (closes - opens) // 2
    width = int(widths[0]) if width is None else width
    ragged = np.flatnonzero(widths != width)
    n_rows = int(ragged[0]) if len(ragged) else len(opens)
    if n_rows == 0:
        return None
    starts = events[code == _NUM]
    ends = np.append(events[opens[1:] - 1], events[last]) + 1  # the comma after each row
    values, n_rows = _convert(text, starts, ends, n_rows, width)
    if n_rows == 0:
        return None
    return int(ends[n_rows - 1]), values, n_rows, width


def _convert(
    text: str, starts: np.ndarray, ends: np.ndarray, n_rows: int, width: int
) -> tuple[np.ndarray, int]:
    """The values of the first ``n_rows`` rows (each ending at ``ends``, its numbers
    starting at ``starts``), as the exact path reads them: fewer rows if one holds a number
    the exact path refuses by its text (an integer of over 39 digits, a float beyond
    float64), which is reported from there."""
    values = np.fromstring(text[: int(ends[n_rows - 1])].translate(_SPACES), sep=" ")
    if len(values) != n_rows * width:  # cannot happen for text the grammar passed
        return values[:0], 0
    for k in np.flatnonzero(~(np.abs(values) <= FLOAT32_MAX)):
        token = _NUMBER.match(text, int(starts[k]))
        assert token is not None
        integer = token.group(1) is None and token.group(2) is None
        if np.isinf(values[k]) or (integer and len(token.group().lstrip("-")) > MAX_INT_DIGITS):
            n_rows = int(k) // width
            values = values[: n_rows * width]
            break
    for k in np.flatnonzero((values == 0) & np.signbit(values)):
        token = _NUMBER.match(text, int(starts[k]))
        assert token is not None
        if token.group(1) is None and token.group(2) is None:  # "-0" is the integer 0
            values[k] = 0.0
    return values, n_rows


def _counted(path: Path) -> tuple[str, int]:
    """The body's encoding (as ``json.loads`` detects it) and an upper bound on the numbers
    it holds (commas + 1); a body that is not text in its encoding is refused here, as
    ``json.load`` refused it before reading any JSON."""
    with path.open("rb") as fh:
        head = fh.read(4)
        encoding = json.detect_encoding(head)
        fh.seek(0)
        decoder = codecs.getincrementaldecoder(encoding)("surrogatepass")
        commas, offset = 0, 0
        for raw in iter(lambda: fh.read(_READ), b""):
            try:
                commas += decoder.decode(raw).count(",")
            except UnicodeDecodeError as exc:
                raise InvalidDataset(not_utf(exc, offset - len(decoder.getstate()[0]))) from None
            offset += len(raw)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError as exc:
            raise InvalidDataset(not_utf(exc, offset - len(exc.object))) from None
    return encoding, commas + 1


def parse_json_rows(path: Path) -> tuple[np.ndarray, str | None]:
    """`{"data": [[...], ...], "name": ...}` as a float64 array and the name; every
    refusal an :class:`InvalidDataset` naming the place (rows, columns from 0)."""
    encoding, capacity = _counted(path)
    with path.open("rb") as fh:
        return _Parser(fh, encoding, capacity).document()
