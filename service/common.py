"""Helpers the stores share: ids that become file names, timestamps, Redis replies, JSON.

One definition each: the dataset store, the result store, the queue and the worker used to
carry their own copies, and copies drift (two id checks had already come apart).
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from typing import Any

import numpy as np

#: An id that is safe as a file or directory name: no separators, no leading dot, bounded.
SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def is_safe_id(ident: str) -> bool:
    """Whether ``ident`` may name a file under the data directory (dataset and job ids)."""
    return SAFE_ID.fullmatch(ident) is not None


def utc_now() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(timezone.utc)


def now_stamps() -> tuple[str, str]:
    """The current time as ISO 8601 UTC (milliseconds) and as epoch seconds (a sorted-set
    score), the two forms the queue writes."""
    moment = utc_now()
    return moment.isoformat(timespec="milliseconds"), f"{moment.timestamp():.6f}"


def text(value: Any) -> Any:
    """A Redis reply as ``str`` whether or not the client decodes responses (None stays)."""
    return value.decode() if isinstance(value, bytes) else value


def json_number(value: Any) -> float | int | None:
    """A JSON-safe number: ints stay ints, NaN and infinities (not JSON) become None."""
    if value is None:
        return None
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        return int(value)
    number = float(value)
    return number if math.isfinite(number) else None


def jsonable(value: Any) -> Any:
    """Plain JSON: numpy scalars and arrays unwrapped, NaN and infinities as None."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer | float | np.floating):
        return json_number(value)
    return value


def stream_entries(reply: Any) -> list[tuple[str, Any]]:
    """Entries of an XREADGROUP reply in RESP2 (list) or RESP3 (dict) form."""
    if not reply:
        return []
    streams = reply.items() if isinstance(reply, dict) else reply
    entries: list[tuple[str, Any]] = []
    for _, items in streams:
        entries.extend((text(entry_id), fields) for entry_id, fields in items)
    return entries
