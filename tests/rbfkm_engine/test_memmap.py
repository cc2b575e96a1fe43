"""A memory-mapped ``.npy`` is fitted where it lies: the fit's own memory stays a fraction
of the file.

The fit runs in a subprocess whose data segment (``RLIMIT_DATA``: heap and anonymous
mappings, not a read-only mapped file) may grow by half the file's size beyond
what its imports took: a fit that copied ``X`` into memory would fail there. Data far
from the origin are centred in a copy, itself a mapped temporary file (see
docs/distributed.md). What the fit holds is a few vectors per row (labels, distances) and
its blocks (8 192 rows here). The file's pages are read through the page cache, block by
block.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

ROWS, FEATURES = 400_000, 128

_FIT = textwrap.dedent(
    """
    import re, resource, sys
    import numpy as np, torch
    torch.set_num_threads(1)
    import rbfkm_engine.model
    from rbfkm_engine import RBFKMeans

    def data_segment():
        status = open("/proc/self/status").read()
        return int(re.search(r"VmData:\\s+(\\d+)", status).group(1)) * 1024

    X = np.load(sys.argv[1], mmap_mode="r")
    cap = data_segment() + X.nbytes // 2
    resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
    model = RBFKMeans(n_clusters=4, assignment=sys.argv[2], max_iter=12, device="cpu",
                      chunk_size=8192, random_state=0).fit(X)
    print(np.bincount(model.labels_, minlength=4).min(), model.cluster_centers_.mean())
    """
)
#: Where the blobs sit: about the origin (fitted as they are), and far from it (centred).
OFFSETS = {"near": -6.0, "far": 1000.0}


def _write_blobs(path: Path, offset: float) -> Path:
    """Four blobs at ``offset + 4 j``, written block by block (never whole in memory)."""
    X = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(ROWS, FEATURES))
    rng = np.random.default_rng(0)
    for start in range(0, ROWS, 50_000):
        rows = slice(start, min(ROWS, start + 50_000))
        blob = rng.integers(0, 4, rows.stop - rows.start).astype(np.float32)
        noise = rng.standard_normal((rows.stop - rows.start, FEATURES), dtype=np.float32)
        X[rows] = noise + 4.0 * blob[:, None] + offset
    X.flush()
    del X
    return path


@pytest.fixture(scope="module")
def mapped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The blobs' file at each offset, written when first asked for."""
    folder = tmp_path_factory.mktemp("memmap")
    return {name: _write_blobs(folder / f"{name}.npy", offset) for name, offset in OFFSETS.items()}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("where", "assignment"), [("near", "hard"), ("near", "entmax15"), ("far", "hard")]
)
def test_a_mapped_file_is_fitted_in_half_its_size(
    mapped: dict[str, Path], where: str, assignment: str
) -> None:
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc to read the data segment")
    done = subprocess.run(
        [sys.executable, "-c", _FIT, str(mapped[where]), assignment],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    smallest, mean = done.stdout.split()
    assert int(smallest) > ROWS // 8  # four blobs found, none empty
    assert float(mean) == pytest.approx(OFFSETS[where] + 6.0, abs=0.5)
