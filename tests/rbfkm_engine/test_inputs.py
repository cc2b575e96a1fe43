"""What a caller hands the estimator: tensors checked in place, arrays converted without
writing to them, weights and initial centres checked with messages that say what to
change."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from rbfkm_engine.inputs import array_input, check_tensor, init_array, sample_weights

CPU = torch.device("cpu")


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.int64, torch.float16))
def test_a_finite_2d_real_tensor_passes(dtype: torch.dtype) -> None:
    check_tensor(torch.ones((3, 2), dtype=dtype))


@pytest.mark.parametrize(
    ("X", "message"),
    [
        (torch.ones(3), "Expected a 2D tensor, got shape (3,)"),
        (torch.ones((2, 2, 2)), "Expected a 2D tensor"),
        (torch.ones((2, 2), dtype=torch.complex64), "X must be real-valued"),
        (torch.ones((2, 2), dtype=torch.bool), "X must be real-valued, got dtype torch.bool"),
        (torch.ones((0, 2)), "X must be non-empty, got shape (0, 2)"),
        (torch.ones((2, 0)), "X must be non-empty"),
        (torch.tensor([[1.0, math.nan]]), "contains NaN or infinity; clean or impute it"),
        (torch.tensor([[1.0], [-math.inf]]), "contains NaN or infinity"),
    ],
)
def test_tensors_that_are_not_data_are_named(X: torch.Tensor, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        check_tensor(X)
    assert message in str(caught.value)


def test_array_input_keeps_the_precision_or_converts() -> None:
    a64 = np.arange(6.0).reshape(3, 2)
    assert array_input(a64, CPU, None).dtype == torch.float64
    assert array_input(a64.astype(np.float32), CPU, None).dtype == torch.float32
    t = array_input(a64, CPU, torch.float32)
    assert t.dtype == torch.float32 and t.tolist() == a64.tolist()


def test_a_read_only_array_is_read_without_a_warning() -> None:
    array = np.arange(6.0).reshape(3, 2)
    array.flags.writeable = False  # a memory-mapped file, say
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = array_input(array, CPU, None)
    assert t.tolist() == array.tolist()


def test_sample_weights_none_scalar_list_and_tensor() -> None:
    X = torch.zeros((4, 2), dtype=torch.float32)
    assert sample_weights(None, X) is None
    scalar = sample_weights(2.0, X)
    assert scalar.dtype == torch.float32 and scalar.tolist() == [2.0] * 4
    assert sample_weights([0.0, 1.0, 2.0, 3.0], X).tolist() == [0.0, 1.0, 2.0, 3.0]
    w = torch.tensor([1.0, 0.0, 0.5, 2.0], dtype=torch.float64, requires_grad=True)
    converted = sample_weights(w, X)
    assert converted.dtype == torch.float32 and not converted.requires_grad


@pytest.mark.parametrize(
    ("w", "message"),
    [
        ([1.0, 2.0], "sample_weight.shape == (2,), expected (4,)"),
        (np.ones((4, 1)), "sample_weight.shape == (4, 1), expected (4,)"),
        ([1.0, -1.0, 1.0, 1.0], "must be finite and non-negative"),
        ([1.0, math.nan, 1.0, 1.0], "must be finite and non-negative"),
        ([1.0, math.inf, 1.0, 1.0], "must be finite and non-negative"),
        ([0.0, 0.0, 0.0, 0.0], "must not be all zero: give at least one sample a positive"),
        (0.0, "must not be all zero"),
    ],
)
def test_bad_sample_weights_are_named(w: object, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        sample_weights(w, torch.zeros((4, 2)))
    assert message in str(caught.value)


def test_init_array_from_arrays_lists_and_tensors() -> None:
    expected = [[0.0, 1.0], [2.0, 3.0]]
    for init in (np.array(expected, dtype=np.float32), expected, torch.tensor(expected)):
        C = init_array(init, 2, 2, CPU)
        assert C.dtype == torch.float64 and C.tolist() == expected


@pytest.mark.parametrize(
    ("init", "message"),
    [
        (
            np.zeros((3, 2)),
            "init array must have shape (n_clusters, n_features) = (2, 2), got (3, 2)",
        ),
        (np.zeros(4), "got (4,)"),
        (np.array([[0.0, 1.0], [math.nan, 0.0]]), "init array contains NaN or infinity"),
        (torch.tensor([[0.0, math.inf], [0.0, 0.0]]), "init array contains NaN or infinity"),
    ],
)
def test_bad_init_arrays_are_named(init: object, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        init_array(init, 2, 2, CPU)
    assert message in str(caught.value)
