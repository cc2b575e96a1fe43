"""Fitted results on the shared data directory, written atomically, one directory per attempt.

Layout: ``{data_dir}/results/{job_id}/attempt-{n}/`` holds ``centroids.npy``, ``labels.npy``,
``assignments.npz`` (scipy sparse CSR), ``summary.json`` and ``projection.npz`` (a 2-D
picture of a sample, :mod:`service.projection`). An attempt is written into a
hidden staging directory beside it and renamed into place once every file is flushed, so a
reader never sees half a result. Each attempt (the queue's fencing token) has its own
directory, so a stale worker finishing late never overwrites the winner's files; it deletes
only its own. Readers serve the highest-numbered complete attempt: once a job has succeeded
no higher attempt can exist (attempt numbers only grow while a job runs), and lower ones
are stale leftovers the winner prunes.

Files rather than Redis: results can be hundreds of MB (the soft assignments), the API
streams ``assignments.npz`` straight from disk, and Redis keeps only the small metadata.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse

from service import projection
from service.common import is_safe_id, jsonable, utc_now
from service.errors import ProjectionNotFound, ResultNotFound

if TYPE_CHECKING:
    from rbfkm_engine import RBFKMeans

_ATTEMPT = re.compile(r"attempt-(\d+)")
#: The files every stored result has (results stored before projections lack that one).
_FILES = ("centroids.npy", "labels.npy", "assignments.npz", "summary.json")


def k_path_entries(path: list[Any]) -> list[dict[str, Any]]:
    """The k path of a fitted estimator as the result reports it: its records without
    their centres."""
    return [
        {
            "k": int(record.k),
            "sigma_appear": record.sigma_appear,
            "sigma_split": record.sigma_split,
            "inertia": record.inertia,
        }
        for record in path
    ]


def _fsync_file(path: Path) -> None:
    with path.open("rb") as handle:
        os.fsync(handle.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ResultStore:
    """Store and read fitted results under ``{data_dir}/results``."""

    def __init__(self, data_dir: Path | str) -> None:
        self.root = Path(data_dir) / "results"

    def job_dir(self, job_id: str) -> Path:
        """The directory of a job's results (ids are checked: they become path names)."""
        if not is_safe_id(job_id):
            raise ResultNotFound(job_id)
        return self.root / job_id

    def _attempts(self, job_id: str) -> list[tuple[int, Path]]:
        directory = self.job_dir(job_id)
        if not directory.is_dir():
            return []
        found = []
        for child in directory.iterdir():
            match = _ATTEMPT.fullmatch(child.name)
            if match and child.is_dir():
                found.append((int(match.group(1)), child))
        return sorted(found)

    def result_dir(self, job_id: str) -> Path:
        """The committed attempt's directory; ResultNotFound if there is none."""
        attempts = self._attempts(job_id)
        if not attempts:
            raise ResultNotFound(job_id)
        return attempts[-1][1]

    def save(
        self, job_id: str, model: RBFKMeans, X: Any, *, attempt: int = 1, processes: int = 1
    ) -> dict[str, Any]:
        """Write one attempt's result atomically; returns the metadata for the queue.

        The summary carries the partition's quality metrics (:mod:`rbfkm_engine.quality`,
        on ``X``), the fit's k path without its centres, and ``processes``, how many
        processes fitted it (a parallel job's, :mod:`service.parallel`).
        """
        from rbfkm_engine.quality import quality_metrics

        if attempt < 1:
            raise ValueError("attempt must be >= 1")
        directory = self.job_dir(job_id)
        directory.mkdir(parents=True, exist_ok=True)
        staging = directory / f".staging-{attempt}-{uuid.uuid4().hex[:8]}"
        staging.mkdir()
        try:
            centroids = np.asarray(model.cluster_centers_)
            labels = np.asarray(model.labels_, dtype=np.int64)
            assignments = scipy.sparse.csr_matrix(model.soft_assign(X))
            np.save(staging / "centroids.npy", centroids)
            np.save(staging / "labels.npy", labels)
            scipy.sparse.save_npz(staging / "assignments.npz", assignments, compressed=False)
            n_samples, n_features = int(labels.shape[0]), int(centroids.shape[1])
            metrics = quality_metrics(X, labels, int(centroids.shape[0]))
            summary = jsonable(
                {
                    "centroids": centroids,
                    "inertia": model.inertia_,
                    "n_iter": model.n_iter_,
                    "sigma": model.sigma_,
                    "history": list(getattr(model, "history_", [])),
                    "assignment": getattr(model, "assignment", "entmax15"),
                    "metric": getattr(model, "metric", "euclidean"),
                    "n_samples": n_samples,
                    "n_features": n_features,
                    "n_clusters": int(centroids.shape[0]),
                    "metrics": metrics,
                    "k_path": k_path_entries(getattr(model, "k_path_", [])),
                    "stopped_early": bool(getattr(model, "stopped_early_", False)),
                    "converged": bool(getattr(model, "converged_", True)),
                    "device": str(getattr(model, "device", "cpu")),
                    "processes": int(processes),
                    "attempt": attempt,
                    "created_at": utc_now().isoformat(timespec="milliseconds"),
                }
            )
            (staging / "summary.json").write_text(json.dumps(summary, allow_nan=False))
            picture = projection.project(X, labels, assignments, centroids)
            projection.save(staging / projection.FILENAME, picture)
            stored_bytes = 0
            for name in (*_FILES, projection.FILENAME):
                _fsync_file(staging / name)
                stored_bytes += (staging / name).stat().st_size
            final = directory / f"attempt-{attempt}"
            if final.exists():  # the same attempt saved again: replace it
                shutil.rmtree(final)
            os.rename(staging, final)
            _fsync_dir(directory)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return {
            "attempt": attempt,
            "n_samples": n_samples,
            "n_features": n_features,
            "n_clusters": summary["n_clusters"],
            "inertia": summary["inertia"],
            "n_iter": summary["n_iter"],
            "converged": summary["converged"],
            "sigma": summary["sigma"],
            "assignment": summary["assignment"],
            "assignments_nnz": int(assignments.nnz),
            "stored_bytes": stored_bytes,
        }

    def discard(self, job_id: str, attempt: int) -> None:
        """Delete one attempt's files (a fenced-out worker cleaning up after itself)."""
        directory = self.job_dir(job_id)
        shutil.rmtree(directory / f"attempt-{attempt}", ignore_errors=True)
        for staging in directory.glob(f".staging-{attempt}-*"):
            shutil.rmtree(staging, ignore_errors=True)
        with contextlib.suppress(OSError):
            directory.rmdir()  # only if nothing else is left

    def prune(self, job_id: str, *, keep: int) -> None:
        """Delete every attempt but ``keep`` (stale attempts' leftovers after a success)."""
        for number, path in self._attempts(job_id):
            if number != keep:
                shutil.rmtree(path, ignore_errors=True)
        for staging in self.job_dir(job_id).glob(".staging-*"):
            match = re.fullmatch(r"\.staging-(\d+)-\w+", staging.name)
            if match and int(match.group(1)) < keep:
                shutil.rmtree(staging, ignore_errors=True)

    def exists(self, job_id: str) -> bool:
        """Whether a complete result is stored."""
        try:
            return bool(self._attempts(job_id))
        except ResultNotFound:
            return False

    def summary(self, job_id: str) -> dict[str, Any]:
        """centroids, inertia, n_iter, sigma, history, assignment, n_samples, n_features, ..."""
        return json.loads((self.result_dir(job_id) / "summary.json").read_text())

    def labels(self, job_id: str) -> np.ndarray:
        """Hard labels (int64, one per sample)."""
        return np.load(self.result_dir(job_id) / "labels.npy")

    def centroids(self, job_id: str) -> np.ndarray:
        """The fitted centres (k x d) in the dtype of the fit."""
        return np.load(self.result_dir(job_id) / "centroids.npy")

    def assignments(self, job_id: str) -> scipy.sparse.csr_matrix:
        """The soft assignments (n x k, CSR)."""
        return scipy.sparse.csr_matrix(scipy.sparse.load_npz(self.assignments_path(job_id)))

    def assignments_path(self, job_id: str) -> Path:
        """The scipy ``.npz`` file of the soft assignments, to stream as is."""
        return self.result_dir(job_id) / "assignments.npz"

    def projection(self, job_id: str) -> projection.Projection:
        """The 2-D picture of a sample of the data; ProjectionNotFound for a result stored
        before the service recorded one."""
        path = self.result_dir(job_id) / projection.FILENAME
        if not path.is_file():
            raise ProjectionNotFound(job_id)
        return projection.load(path)

    def model(self, job_id: str) -> RBFKMeans:
        """A fitted estimator (CPU) that predicts with the stored centres, without refitting."""
        from rbfkm_engine import RBFKMeans

        summary = self.summary(job_id)
        return RBFKMeans.from_centers(
            self.centroids(job_id),
            assignment=summary["assignment"],
            sigma=summary["sigma"],
            device="cpu",
            metric=summary.get("metric", "euclidean"),  # older results: Euclidean
        )

    def delete(self, job_id: str) -> bool:
        """Delete every file of the job's results; False if there were none."""
        try:
            directory = self.job_dir(job_id)
        except ResultNotFound:
            return False
        if not directory.exists():
            return False
        shutil.rmtree(directory, ignore_errors=True)
        return True

    def purge(self, max_age_s: float) -> int:
        """Delete results older than ``max_age_s`` (retention); returns how many jobs."""
        if not self.root.is_dir():
            return 0
        cutoff = time.time() - max_age_s
        removed = 0
        for directory in self.root.iterdir():
            try:
                if directory.is_dir() and directory.stat().st_mtime < cutoff:
                    shutil.rmtree(directory, ignore_errors=True)
                    removed += 1
            except FileNotFoundError:
                continue
        return removed
