"""Real data sets that ship inside installed packages: nothing is downloaded.

The photographs come from scikit-learn (``sklearn/datasets/images``: ``china.jpg`` and
``flower.jpg``, decoded by pillow) and scikit-image (``skimage/data``: the images whose
files are inside its wheel, decoded by imageio / pillow). Each loader returns a
``common.Dataset`` (float32, C order, no labels, ``gating=False``: the speed and memory
targets were set on the synthetic sets; these sets are reported beside them).

Three shapes of data, as k-means meets them in practice:

- low-d, large n: the RGB pixels of a photograph (colour quantisation, k = 32 and 256);
- mid-d: 8 x 8 grey patches of photographs with each patch's mean removed (the data of
  patch dictionaries and vector quantisation; k = 64 and 1 024);
- high-d: 16 x 16 grey patches, mean removed and scaled to unit length (256-d points on a
  sphere, as L2-normalised embeddings are; they are real pixels, not learned embeddings);
- small tables: the standardised columns of scikit-learn's tabular data sets (iris, wine,
  breast cancer, diabetes; 150 to 569 rows, 4 to 30 columns) at k = 5 and 12, the sizes of
  a first try of the service, where one fit competes with ten cheap restarts.

``REAL_SETS`` names each set once (scikit-learn's digits too): its loader, its arguments
at full size and with ``--quick``, and the modules it needs; :func:`load` raises
:class:`MissingPackage` (a one-line reason) when one of them is absent. numpy and the
decoders are imported inside the functions, so ``compare.py`` can list the keys before it
pins the thread pools.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    from common import Dataset

#: scikit-learn's two sample photographs (427 x 640 x 3 each).
SKLEARN_PHOTOS = ("china.jpg", "flower.jpg")
#: scikit-image's photographs and micrographs whose files are in its wheel (checked in
#: ``skimage/data/``), all 8-bit; greyed where in colour. With scikit-learn's two they
#: give 68 191 8 x 8 patches and 16 891 16 x 16 ones.
SKIMAGE_PHOTOS = (
    "camera",
    "astronaut",
    "coffee",
    "chelsea",
    "rocket",
    "hubble_deep_field",
    "brick",
    "grass",
    "gravel",
    "moon",
    "coins",
    "immunohistochemistry",
    "cell",
)
#: ITU-R BT.709 luma weights, as ``skimage.color.rgb2gray``.
LUMA = (0.2125, 0.7154, 0.0721)
#: 16 x 16 patches whose mean-free norm is below this (flat sky, saturated areas: about
#: 0.4 grey levels of spread) are dropped before scaling to unit length.
FLAT_NORM = 0.025


# --------------------------------------------------------------------------- images


def sklearn_photo(name: str) -> np.ndarray:
    """One of scikit-learn's sample photographs, uint8 (h, w, 3); needs pillow."""
    from sklearn.datasets import load_sample_image

    return load_sample_image(name)


def skimage_photo(name: str) -> np.ndarray:
    """One of scikit-image's images by its ``skimage.data`` name, as shipped (uint8)."""
    import skimage.data

    return getattr(skimage.data, name)()


def grey(image: np.ndarray) -> np.ndarray:
    """An 8-bit image as float64 grey levels in [0, 1] (BT.709 luma for RGB(A))."""
    import numpy as np

    img = np.asarray(image, dtype=np.float64) / 255.0
    if img.ndim == 3:
        img = img[..., :3] @ np.asarray(LUMA)
    return img


def patches_of(image: np.ndarray, size: int) -> np.ndarray:
    """The non-overlapping ``size`` x ``size`` patches of a 2-D image, one per row
    (row-major order of patches; the right and bottom remainders are left out)."""
    h, w = (image.shape[0] // size) * size, (image.shape[1] // size) * size
    blocks = image[:h, :w].reshape(h // size, size, w // size, size)
    return blocks.transpose(0, 2, 1, 3).reshape(-1, size * size)


def photo_patches(size: int) -> np.ndarray:
    """``size`` x ``size`` grey patches of every photograph above, each patch's mean removed
    (float64; scikit-image's photographs first, then scikit-learn's)."""
    import numpy as np

    images = [skimage_photo(n) for n in SKIMAGE_PHOTOS]
    images += [sklearn_photo(n) for n in SKLEARN_PHOTOS]
    P = np.concatenate([patches_of(grey(img), size) for img in images])
    return P - P.mean(axis=1, keepdims=True)


def subsample(X: np.ndarray, max_rows: int | None, seed: int = 0) -> np.ndarray:
    """At most ``max_rows`` rows of X, drawn without replacement (seed fixed), in their
    original order; all of X when ``max_rows`` is None or not smaller."""
    import numpy as np

    if max_rows is None or max_rows >= X.shape[0]:
        return X
    rows = np.sort(np.random.default_rng(seed).choice(X.shape[0], max_rows, replace=False))
    return X[rows]


def _dataset(name: str, X: np.ndarray, k: int, description: str, **extra: Any) -> Dataset:
    import numpy as np
    from common import Dataset

    extra.setdefault("gating", False)
    X = np.ascontiguousarray(X, dtype=np.float32)
    return Dataset(
        name=f"{name}-{X.shape[0]}x{X.shape[1]}-k{k}", X=X, k=k, description=description, **extra
    )


# --------------------------------------------------------------------------- loaders


def colours_dataset(
    k: int = 32, photo: str = "china.jpg", max_rows: int | None = None, **extra: Any
) -> Dataset:
    """The RGB pixels of one of scikit-learn's photographs as points in [0, 1]^3.

    ``china.jpg`` or ``flower.jpg``: 427 x 640 = 273 280 pixels, 3 columns (R, G, B
    divided by 255), row-major pixel order; ``max_rows`` keeps a random subset. Fitting k
    centres is colour quantisation: a palette of k colours for the photograph.
    """
    image = sklearn_photo(photo)
    X = subsample(image.reshape(-1, 3) / 255.0, max_rows)
    stem = photo.rsplit(".", 1)[0]
    what = f"RGB pixels / 255 of sklearn's {photo} ({image.shape[0]} x {image.shape[1]})"
    if X.shape[0] < image.shape[0] * image.shape[1]:
        what += f", {X.shape[0]} drawn at random"
    return _dataset(f"colours-{stem}", X, k, what + f"; palette of {k}", **extra)


def patches_dataset(k: int = 64, max_rows: int | None = None, **extra: Any) -> Dataset:
    """8 x 8 grey patches of 15 real photographs, each patch's mean removed: 64-d.

    The photographs: scikit-image's camera, astronaut, coffee, chelsea, rocket,
    hubble_deep_field, brick, grass, gravel, moon, coins, immunohistochemistry, cell and
    scikit-learn's china and flower; in grey (BT.709 luma, levels in [0, 1]), cut into
    non-overlapping 8 x 8 patches (68 191 in all), the mean of each patch subtracted (its
    brightness: the patch's texture remains; 332 flat patches become the origin).
    ``max_rows`` keeps a random subset.
    """
    P = photo_patches(8)
    X = subsample(P, max_rows)
    what = "8x8 grey patches of 15 photos (skimage, sklearn), patch mean removed"
    if X.shape[0] < P.shape[0]:
        what += f", {X.shape[0]} of {P.shape[0]} drawn at random"
    return _dataset("patches", X, k, what, **extra)


def unit_patches_dataset(k: int = 128, max_rows: int | None = None, **extra: Any) -> Dataset:
    """16 x 16 grey patches of the same photographs, mean removed, scaled to unit length.

    Non-overlapping 16 x 16 patches (256-d) of the 15 photographs of
    :func:`patches_dataset`, each patch's mean subtracted; patches whose remaining norm is
    under ``FLAT_NORM`` (flat: sky, saturated areas) are dropped and the rest divided by
    their norm. The points lie on the unit sphere of R^256, where inner products and
    distances agree as with L2-normalised embeddings; they are real pixels, not learned
    features. ``max_rows`` keeps a random subset.
    """
    import numpy as np

    P = photo_patches(16)
    norms = np.linalg.norm(P, axis=1)
    keep = norms >= FLAT_NORM
    X = subsample(P[keep] / norms[keep, None], max_rows)
    what = (
        f"16x16 grey patches of 15 photos, mean removed, L2-normalised "
        f"({int(keep.sum())} of {keep.size} not flat)"
    )
    if X.shape[0] < keep.sum():
        what += f", {X.shape[0]} drawn at random"
    return _dataset("unitpatches", X, k, what, **extra)


#: The tabular sets of :func:`tabular_dataset`: key -> scikit-learn's loader name.
TABLES = {
    "iris": "load_iris",
    "wine": "load_wine",
    "cancer": "load_breast_cancer",
    "diabetes": "load_diabetes",
}


def tabular_dataset(table: str, k: int, **extra: Any) -> Dataset:
    """The numeric columns of one of scikit-learn's bundled tables, each standardised
    (mean 0, variance 1, as such columns are before k-means); the classes are not given:
    the tables' classes are not clusters of these columns."""
    import numpy as np
    import sklearn.datasets

    raw = getattr(sklearn.datasets, TABLES[table])().data.astype(np.float64)
    X = (raw - raw.mean(axis=0)) / raw.std(axis=0)
    what = f"sklearn {TABLES[table][5:]} table, {raw.shape[1]} standardised columns"
    return _dataset(table, X, k, what, **extra)


# --------------------------------------------------------------------------- registry


def digits_dataset(**extra: Any) -> Dataset:
    """scikit-learn's handwritten digits, as ``common.load_digits_dataset`` (1797 x 64,
    k = 10, true labels; not gating)."""
    from common import load_digits_dataset

    extra.setdefault("gating", False)
    return load_digits_dataset(**extra)


@dataclass(frozen=True)
class RealSet:
    """One real data set: its loader, the loader's arguments at full size and with
    ``--quick``, and the modules (import names) that reading its files needs."""

    loader: Callable[..., Dataset]
    full: dict[str, Any]
    quick: dict[str, Any]
    requires: tuple[str, ...]
    summary: str


REAL_SETS: dict[str, RealSet] = {
    "digits": RealSet(
        digits_dataset, {}, {}, ("sklearn",), "sklearn digits 1797 x 64, k 10, true labels"
    ),
    "colours": RealSet(
        colours_dataset,
        full={"k": 32},
        quick={"k": 8, "max_rows": 4000},
        requires=("PIL",),
        summary="RGB pixels of china.jpg 273280 x 3, k 32",
    ),
    "colours256": RealSet(
        colours_dataset,
        full={"k": 256, "photo": "flower.jpg", "max_rows": 100_000, "max_quality_seeds": 3},
        quick={"k": 32, "photo": "flower.jpg", "max_rows": 4000},
        requires=("PIL",),
        summary="RGB pixels of flower.jpg 100000 x 3, k 256",
    ),
    "patches": RealSet(
        patches_dataset,
        full={"k": 64, "max_rows": 50_000},
        quick={"k": 16, "max_rows": 3000},
        requires=("skimage", "PIL"),
        summary="8x8 grey photo patches 50000 x 64, k 64",
    ),
    "patches1024": RealSet(
        patches_dataset,
        full={"k": 1024, "max_rows": 10_000, "max_quality_seeds": 3},
        quick={"k": 64, "max_rows": 3000},
        requires=("skimage", "PIL"),
        summary="8x8 grey photo patches 10000 x 64, k 1024",
    ),
    "colours4096": RealSet(
        colours_dataset,
        full={"k": 4096, "photo": "china.jpg", "max_rows": 200_000, "max_quality_seeds": 2},
        quick={"k": 64, "photo": "china.jpg", "max_rows": 4000},
        requires=("PIL",),
        summary="RGB pixels of china.jpg 200000 x 3, k 4096",
    ),
    "unitpatches": RealSet(
        unit_patches_dataset,
        full={"k": 128},
        quick={"k": 16, "max_rows": 2000},
        requires=("skimage", "PIL"),
        summary="16x16 grey photo patches, unit length, 16814 x 256, k 128",
    ),
}
REAL_SETS.update(
    {
        f"{table}{k}": RealSet(
            tabular_dataset,
            full={"table": table, "k": k},
            quick={"table": table, "k": k},
            requires=("sklearn",),
            summary=f"standardised sklearn {table} table, k {k}",
        )
        for table in TABLES
        for k in (5, 12)
    }
)
KEYS = tuple(REAL_SETS)
#: pip names of the modules above, for the skip message.
PIP_NAMES = {"PIL": "pillow", "skimage": "scikit-image", "sklearn": "scikit-learn"}


class MissingPackage(RuntimeError):
    """A package that a real data set needs does not import here."""


def missing(key: str) -> list[str]:
    """The pip names of the packages that set ``key`` needs and that do not import here."""
    absent = []
    for module in REAL_SETS[key].requires:
        try:
            __import__(module)
        except ImportError:
            absent.append(PIP_NAMES.get(module, module))
    return absent


def load(key: str, quick: bool = False, **extra: Any) -> Dataset:
    """Real data set ``key`` at full size (or at its ``--quick`` size).

    Raises :class:`MissingPackage`, whose message fits on one line, when a package it needs
    is absent (or when a file is not in the installed package and its fetcher, which would
    download it, is not installed: nothing is downloaded here).
    """
    spec = REAL_SETS[key]
    absent = missing(key)
    if absent:
        raise MissingPackage(f"needs {', '.join(absent)} (the 'bench' extra)")
    try:
        return spec.loader(**(spec.quick if quick else spec.full), **extra)
    except ModuleNotFoundError as exc:  # scikit-image's fetcher (pooch) for a file not shipped
        first = str(exc).splitlines()[0] if str(exc) else repr(exc)
        raise MissingPackage(f"cannot read its files here: {first[:120]}") from exc
