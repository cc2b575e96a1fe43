"""A progress bar for a job being waited for (tqdm; off when tqdm is missing, and by
default when stderr is not a terminal)."""

from __future__ import annotations

from typing import Any

from rbfkm_client.models import Job


class JobBar:
    """A bar from 0 to 100 % of a job's ``progress.fraction``, with its status, the
    annealing temperature and the iteration after it.

    ``enabled``: True shows it, False hides it, None shows it on a terminal only.
    """

    def __init__(self, job: Job, enabled: bool | None = None) -> None:
        self._bar: Any = None
        if enabled is False:
            return
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return
        self._bar = tqdm(
            total=100,
            desc=f"job {job.id[:8]}",
            unit="%",
            disable=None if enabled is None else not enabled,
            bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}{postfix}]",
        )
        self.update(job)

    def update(self, job: Job) -> None:
        """Show where ``job`` is."""
        if self._bar is None:
            return
        fraction = job.fraction
        if job.status == "succeeded":
            fraction = 1.0
        if fraction is not None:
            self._bar.n = round(100 * fraction, 1)
        postfix = {"status": job.status}
        for key in ("sigma", "iteration"):
            if job.progress.get(key) is not None:
                postfix[key] = f"{job.progress[key]:.3g}"
        self._bar.set_postfix(postfix, refresh=False)
        self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
