"""Rate-limited log lines about a lost dependency (Redis).

A worker whose Redis is gone fails on every call: the lease thread every 0.1 s, the
progress writes, the claim loop every second. One warning per failure buried the log (a
line every 100 ms while Redis was down). :class:`OutageLog` says instead: one line when the
connection is lost, a reminder at most every ``remind_every_s`` while it stays lost, and
one line when it is back, with how long it was gone. It is thread-safe, so the threads of
one process share one and report one outage, not one per thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

#: Seconds between two reminders while the dependency stays lost.
REMIND_EVERY_S = 30.0


class OutageLog:
    """Logs the outages of one dependency (``what``), not every failed call."""

    def __init__(
        self,
        logger: logging.Logger,
        what: str = "redis",
        *,
        remind_every_s: float = REMIND_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if remind_every_s <= 0:
            raise ValueError("remind_every_s must be > 0")
        self.logger = logger
        self.what = what
        self.remind_every_s = remind_every_s
        self.clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None  # when the outage began; None: not lost
        self._last_line = 0.0
        self._failures = 0

    @property
    def lost(self) -> bool:
        """Whether the last call reported was a failure."""
        return self._since is not None

    def failure(self, exc: BaseException | str, during: str = "") -> None:
        """A call failed: logs the first failure of an outage, then a reminder at most every
        ``remind_every_s``; the failures in between are only counted."""
        now = self.clock()
        where = f" ({during})" if during else ""
        with self._lock:
            self._failures += 1
            if self._since is None:
                self._since = self._last_line = now
                self.logger.warning(
                    "%s lost%s; retrying, a reminder every %.0f s while it stays lost: %s",
                    self.what,
                    where,
                    self.remind_every_s,
                    exc,
                )
            elif now - self._last_line >= self.remind_every_s:
                self._last_line = now
                self.logger.warning(
                    "%s still lost after %.0f s, %d failed calls%s: %s",
                    self.what,
                    now - self._since,
                    self._failures,
                    where,
                    exc,
                )

    def success(self) -> None:
        """A call went through: logs one line if the dependency was lost."""
        if self._since is None:  # the common case, without the lock
            return
        now = self.clock()
        with self._lock:
            if self._since is None:
                return
            self.logger.warning(
                "%s back after %.1f s (%d failed calls)",
                self.what,
                now - self._since,
                self._failures,
            )
            self._since = None
            self._failures = 0
