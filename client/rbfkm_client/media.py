"""The media types of the rbfkm API: what a body is sent as and what a response is read as.

One definition for both sides: the service (``service.uploads``, ``service.formats``, its
routes) imports them from here, so client and server cannot drift apart.
"""

from __future__ import annotations

JSON = "application/json"
CSV = "text/csv"
NPY = "application/x-npy"
#: scipy's sparse ``.npz`` (``scipy.sparse.save_npz``): the soft assignments, whole.
NPZ = "application/x-npz"
PARQUET = "application/vnd.apache.parquet"
#: An Arrow IPC stream (the streaming format, not the random-access file format).
ARROW_STREAM = "application/vnd.apache.arrow.stream"
#: RFC 9457 problem details: every error response.
PROBLEM_JSON = "application/problem+json"
#: The media types a result table is sent as.
TABLE_TYPES: tuple[str, ...] = (PARQUET, ARROW_STREAM)
#: Server-sent events (``GET /v1/jobs/{id}/events``).
EVENT_STREAM = "text/event-stream"
