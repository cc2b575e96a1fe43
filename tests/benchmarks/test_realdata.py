"""benchmarks/realdata.py: the real data sets have the documented shapes and values, and
a missing package is a one-line reason (compare.py's skip is tested in test_compare.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"
sys.path.insert(0, str(BENCH))

import realdata  # noqa: E402

#: key -> (n, d, k) at full size and with --quick, as the module documents them.
SHAPES = {
    "digits": ((1797, 64, 10), (1797, 64, 10)),
    "colours": ((273_280, 3, 32), (4000, 3, 8)),
    "colours256": ((100_000, 3, 256), (4000, 3, 32)),
    "patches": ((50_000, 64, 64), (3000, 64, 16)),
    "patches1024": ((10_000, 64, 1024), (3000, 64, 64)),
    "colours4096": ((200_000, 3, 4096), (4000, 3, 64)),
    "unitpatches": ((16_814, 256, 128), (2000, 256, 16)),
    **{
        f"{table}{k}": (((n, d, k),) * 2)
        for table, n, d in [
            ("iris", 150, 4),
            ("wine", 178, 13),
            ("cancer", 569, 30),
            ("diabetes", 442, 10),
        ]
        for k in (5, 12)
    },
}


def test_every_set_has_documented_shapes() -> None:
    assert set(SHAPES) == set(realdata.KEYS)


def test_patches_of_cuts_non_overlapping_blocks_row_major() -> None:
    image = np.arange(5 * 7, dtype=np.float64).reshape(5, 7)
    P = realdata.patches_of(image, 2)
    assert P.shape == (2 * 3, 4)  # the last row and column are left out
    np.testing.assert_array_equal(P[0], [0, 1, 7, 8])
    np.testing.assert_array_equal(P[1], [2, 3, 9, 10])
    np.testing.assert_array_equal(P[3], [14, 15, 21, 22])


def test_grey_is_bt709_luma_in_unit_range() -> None:
    rgb = np.zeros((1, 3, 3), dtype=np.uint8)
    rgb[0, 0], rgb[0, 1], rgb[0, 2] = (255, 0, 0), (0, 255, 0), (255, 255, 255)
    np.testing.assert_allclose(realdata.grey(rgb)[0], [0.2125, 0.7154, 1.0])
    np.testing.assert_allclose(realdata.grey(np.full((2, 2), 51, np.uint8)), 0.2)


def test_subsample_is_fixed_ordered_and_without_replacement() -> None:
    X = np.arange(1000)[:, None]
    a, b = realdata.subsample(X, 100), realdata.subsample(X, 100)
    np.testing.assert_array_equal(a, b)
    assert len(np.unique(a)) == 100 and np.all(np.diff(a[:, 0]) > 0)
    assert realdata.subsample(X, None) is X and realdata.subsample(X, 5000) is X


def test_a_missing_package_is_a_one_line_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = realdata.RealSet(realdata.colours_dataset, {}, {}, ("no_such_module_rbfkm",), "")
    monkeypatch.setitem(realdata.REAL_SETS, "colours", spec)
    assert realdata.missing("colours") == ["no_such_module_rbfkm"]
    with pytest.raises(realdata.MissingPackage, match="needs no_such_module_rbfkm") as info:
        realdata.load("colours")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("quick", [False, True], ids=["full", "quick"])
@pytest.mark.parametrize("key", sorted(SHAPES))
def test_loader_returns_documented_shape(key: str, quick: bool) -> None:
    if realdata.missing(key):
        pytest.skip(f"{key} needs {realdata.missing(key)} (the 'bench' extra)")
    ds = realdata.load(key, quick=quick)
    n, d, k = SHAPES[key][quick]
    assert ds.shape == (n, d, k)
    assert ds.X.dtype == np.float32 and ds.X.flags.c_contiguous
    assert np.isfinite(ds.X).all()
    assert ds.gating is False
    assert ds.name.endswith(f"-{n}x{d}-k{k}") or key == "digits"
    assert ds.description
    if key.startswith("colours"):
        assert ds.X.min() >= 0 and ds.X.max() <= 1
        assert len(np.unique(ds.X, axis=0)) > 1000  # a photograph, not a flat image
    if key.startswith("patches"):
        np.testing.assert_allclose(ds.X.mean(axis=1), 0, atol=1e-6)
        assert ds.X.std() > 0.01
    if key[-1].isdigit() and key.rstrip("0123456789") in realdata.TABLES:  # standardised
        np.testing.assert_allclose(ds.X.mean(axis=0), 0, atol=1e-5)
        np.testing.assert_allclose(ds.X.std(axis=0), 1, rtol=1e-4)
    if key == "unitpatches":
        np.testing.assert_allclose(np.linalg.norm(ds.X, axis=1), 1, rtol=1e-5)
    if not quick and key == "colours":  # all of china.jpg, in pixel order
        from sklearn.datasets import load_sample_image

        first = load_sample_image("china.jpg")[0, :2].astype(np.float32) / 255
        np.testing.assert_allclose(ds.X[:2], first, rtol=1e-6)
