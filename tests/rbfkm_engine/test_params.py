"""Declarative parameter constraints: what each kind accepts, what the messages say, and
that the table and ``RBFKMeans.__init__`` name the same parameters."""

from __future__ import annotations

import inspect
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rbfkm_engine import RBFKMeans
from rbfkm_engine.device import DEVICE_HELP
from rbfkm_engine.params import (
    ASSIGNMENTS,
    DTYPES,
    INITS,
    PARAMETER_CONSTRAINTS,
    ArrayLike,
    Boolean,
    DeviceName,
    Interval,
    InvalidParameterError,
    NoneValue,
    Options,
    RandomStateInstance,
    describe,
    validate_params,
)

from .conftest import examples

NOT_FINITE = (math.nan, math.inf, -math.inf, np.float64("nan"), np.float32("inf"))

# ------------------------------------------------------------------ Interval


@pytest.mark.parametrize("value", (1, 7, 2**40, np.int64(3), np.int32(1), torch.tensor(2).item()))
def test_int_interval_accepts_integers_in_range(value: object) -> None:
    assert Interval("int", 1, None).accepts(value)


@pytest.mark.parametrize(
    "value", (True, False, np.bool_(True), 0, -3, 1.0, 2.5, "3", None, [1], *NOT_FINITE)
)
def test_int_interval_rejects_bools_floats_strings_and_values_below(value: object) -> None:
    assert not Interval("int", 1, None).accepts(value)


@pytest.mark.parametrize("value", (0.5, 1, 3, np.float32(0.25), np.float64(1e300), 1e-300))
def test_real_interval_accepts_ints_and_floats(value: object) -> None:
    assert Interval("real", 0.0, None, closed="neither").accepts(value)


@pytest.mark.parametrize("value", (True, False, "0.5", None, 0.0, -1e-300, *NOT_FINITE))
def test_real_interval_rejects_bools_non_numbers_nan_inf_and_the_open_bound(
    value: object,
) -> None:
    assert not Interval("real", 0.0, None, closed="neither").accepts(value)


def test_unbounded_real_interval_still_rejects_nan_and_inf() -> None:
    unbounded = Interval("real")
    assert unbounded.accepts(-1e308) and unbounded.accepts(0) and unbounded.accepts(1e308)
    assert not any(unbounded.accepts(value) for value in NOT_FINITE)


@pytest.mark.parametrize(
    ("closed", "low_in", "high_in"),
    [
        ("both", True, True),
        ("left", True, False),
        ("right", False, True),
        ("neither", False, False),
    ],
)
def test_interval_ends_belong_as_closed_says(closed: str, low_in: bool, high_in: bool) -> None:
    interval = Interval("real", 0.0, 1.0, closed=closed)
    assert interval.accepts(0.0) is low_in
    assert interval.accepts(1.0) is high_in
    assert interval.accepts(0.5)
    assert not interval.accepts(-1e-9) and not interval.accepts(1.0 + 1e-9)


@given(
    value=st.floats(allow_nan=True, allow_infinity=True),
    closed=st.sampled_from(("both", "left", "right", "neither")),
)
@settings(max_examples=examples(200))
def test_real_interval_agrees_with_its_definition(value: float, closed: str) -> None:
    low_ok = value >= -2.0 if closed in ("both", "left") else value > -2.0
    high_ok = value <= 3.0 if closed in ("both", "right") else value < 3.0
    expected = math.isfinite(value) and low_ok and high_ok
    assert Interval("real", -2.0, 3.0, closed=closed).accepts(value) is expected


@pytest.mark.parametrize(
    ("interval", "words"),
    [
        (Interval("int", 1, None), "an int >= 1"),
        (Interval("int", 0, None, closed="neither"), "an int > 0"),
        (Interval("real", 0.0, 1.0, closed="neither"), "a float in (0, 1)"),
        (Interval("real", 0.0, 1.0, closed="left"), "a float in [0, 1)"),
        (Interval("real", 0.5, 2.0, closed="right"), "a float in (0.5, 2]"),
        (Interval("int", 0, 2**32 - 1), "an int in [0, 4294967295]"),
        (Interval("real", None, 2.0), "a float <= 2"),
        (Interval("real", None, 2.0, closed="neither"), "a float < 2"),
        (Interval("real"), "a finite float"),
        (Interval("int"), "an int"),
    ],
)
def test_interval_describes_itself(interval: Interval, words: str) -> None:
    assert interval.describe() == words


# ------------------------------------------------------------------ the other kinds


def test_options_accept_exactly_their_strings() -> None:
    options = Options(ASSIGNMENTS)
    assert all(options.accepts(name) for name in ("entmax15", "softmax", "hard"))
    for value in ("Hard", "hard ", "", None, 1, ("hard",)):
        assert not options.accepts(value)
    assert options.describe() == "'entmax15' or 'softmax' or 'hard'"


@pytest.mark.parametrize(
    "value",
    ("auto", "cpu", "cuda", "cuda:0", "cuda:12", torch.device("cpu"), torch.device("cuda", 3)),
)
def test_device_name_accepts_spellings_and_torch_devices(value: object) -> None:
    # Only the spelling: whether this machine has the device is checked at fit.
    assert DeviceName().accepts(value)


@pytest.mark.parametrize("value", ("gpu", "CPU", "cuda:", "cuda:-1", "cuda:x", "mps", "", 0, None))
def test_device_name_rejects_other_values(value: object) -> None:
    assert not DeviceName().accepts(value)
    assert DeviceName().describe() == DEVICE_HELP


@pytest.mark.parametrize(
    "value", (np.zeros((2, 3)), torch.zeros(2, 3), [[0.0, 1.0]], ((0.0, 1.0),), [])
)
def test_array_like_accepts_arrays_tensors_lists_and_tuples(value: object) -> None:
    assert ArrayLike().accepts(value)


@pytest.mark.parametrize("value", ("k-means++", 3, 1.5, None, {"a": 1}))
def test_array_like_rejects_strings_numbers_and_mappings(value: object) -> None:
    assert not ArrayLike().accepts(value)


def test_random_state_instance_is_numpy_random_state_only() -> None:
    assert RandomStateInstance().accepts(np.random.RandomState(0))
    assert not RandomStateInstance().accepts(np.random.default_rng(0))
    assert not RandomStateInstance().accepts(0)


def test_boolean_and_none() -> None:
    assert Boolean().accepts(True) and Boolean().accepts(False)
    assert not any(Boolean().accepts(value) for value in (0, 1, "true", None))
    assert NoneValue().accepts(None)
    assert not any(NoneValue().accepts(value) for value in (0, "", False, "None"))


# ------------------------------------------------------------------ the table


def test_every_init_parameter_has_a_constraint_and_every_constraint_a_parameter() -> None:
    signature = inspect.signature(RBFKMeans.__init__)
    parameters = set(signature.parameters) - {"self"}
    assert parameters == set(PARAMETER_CONSTRAINTS)
    assert RBFKMeans._parameter_constraints is PARAMETER_CONSTRAINTS


def test_every_default_is_valid() -> None:
    signature = inspect.signature(RBFKMeans.__init__)
    defaults = {
        name: parameter.default
        for name, parameter in signature.parameters.items()
        if name != "self"
    }
    validate_params(defaults)
    validate_params(RBFKMeans().get_params(deep=False))


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("n_clusters", 3),
        ("assignment", "softmax"),
        ("sigma0", 0.5),
        ("sigma0", "auto"),
        ("sigma_min", 1e-9),
        ("cooling", 0.99),
        ("overshoot", 1),
        ("overshoot", 2.5),
        ("max_iter", 1),
        ("tol", 0.0),
        ("init", "random"),
        ("init", np.zeros((3, 2))),
        ("n_init", 10),
        ("device", "cuda:1"),
        ("dtype", "float64"),
        ("chunk_size", None),
        ("chunk_size", 1),
        ("random_state", 0),
        ("random_state", 2**32 - 1),
        ("random_state", np.random.RandomState(1)),
        ("random_state", None),
        ("verbose", True),
        ("verbose", 2),
    ],
)
def test_valid_values_pass(name: str, value: object) -> None:
    validate_params({name: value})


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("n_clusters", 0, "n_clusters must be an int >= 1 or 'auto'; got 0"),
        ("n_clusters", True, "n_clusters must be an int >= 1 or 'auto'; got True"),
        ("n_clusters", 2.0, "n_clusters must be an int >= 1 or 'auto'; got 2.0"),
        ("assignment", "kmeans", "assignment must be 'entmax15' or 'softmax' or 'hard'"),
        ("sigma0", 0.0, "sigma0 must be a float > 0 or 'auto'; got 0.0"),
        ("sigma_min", math.nan, "sigma_min must be a float > 0 or 'auto'; got nan"),
        ("sigma0", math.inf, "sigma0 must be a float > 0 or 'auto'; got inf"),
        ("cooling", 1.0, "cooling must be a float in (0, 1); got 1.0"),
        ("cooling", 0, "cooling must be a float in (0, 1); got 0"),
        ("overshoot", 0.5, "overshoot must be a float in [1, 4]; got 0.5"),
        ("overshoot", 8, "overshoot must be a float in [1, 4]; got 8"),
        ("max_iter", 0, "max_iter must be an int >= 1; got 0"),
        ("tol", -1e-3, "tol must be a float >= 0; got -0.001"),
        ("init", "kmeans++", "init must be 'k-means++' or 'random' or an array of shape"),
        ("n_init", False, "n_init must be an int >= 1; got False"),
        ("device", "gpu", f"device must be {DEVICE_HELP}; got 'gpu'"),
        ("dtype", "float16", "dtype must be 'float32' or 'float64'; got 'float16'"),
        ("chunk_size", 0, "chunk_size must be an int >= 1 or None; got 0"),
        ("random_state", -1, "random_state must be an int in [0, 4294967295]"),
        ("random_state", 2**32, "or a numpy RandomState or None; got 4294967296"),
        ("verbose", -1, "verbose must be a bool or an int >= 0; got -1"),
    ],
)
def test_messages_name_the_parameter_what_it_may_be_and_what_it_was(
    name: str, value: object, message: str
) -> None:
    with pytest.raises(InvalidParameterError) as caught:
        validate_params({name: value})
    assert message in str(caught.value)


def test_a_value_that_is_not_plain_is_named_by_its_type() -> None:
    with pytest.raises(InvalidParameterError, match=r"random_state must be .*; got a Generator"):
        validate_params({"random_state": np.random.default_rng(0)})


def test_unknown_parameters_are_named() -> None:
    with pytest.raises(InvalidParameterError, match="unknown parameter 'n_cluster'"):
        validate_params({"n_cluster": 3})


def test_the_error_is_both_a_value_and_a_type_error() -> None:
    # scikit-learn's convention: callers catching either see it.
    for kind in (ValueError, TypeError):
        with pytest.raises(kind):
            validate_params({"dtype": 64})


def test_describe_joins_the_alternatives() -> None:
    assert describe(PARAMETER_CONSTRAINTS["chunk_size"]) == "an int >= 1 or None"
    assert describe([Options(DTYPES)]) == "'float32' or 'float64'"
    assert describe([Options(INITS), ArrayLike()]).startswith("'k-means++' or 'random' or ")


def test_fit_checks_its_parameters_against_the_table() -> None:
    X = np.arange(12.0).reshape(6, 2)
    with pytest.raises(InvalidParameterError, match="cooling must be a float in \\(0, 1\\)"):
        RBFKMeans(2, cooling=1.5, device="cpu").fit(X)
    with pytest.raises(
        InvalidParameterError, match="n_clusters must be an int >= 1 or 'auto'; got True"
    ):
        RBFKMeans(True, device="cpu").fit(X)


# ------------------------------------------------------------------ no torch


def test_params_and_device_import_without_torch() -> None:
    # The service's API process validates job requests with these modules alone.
    code = (
        "import sys\n"
        "import rbfkm_engine.params as params, rbfkm_engine.device as device\n"
        "params.validate_params({'device': 'cuda:1', 'n_clusters': 3, 'sigma0': 'auto'})\n"
        "assert device.is_device_name('cuda:2') and not device.is_device_name('gpu')\n"
        "print(sorted(name for name in ('torch', 'numpy') if name in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
