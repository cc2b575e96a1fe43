"""Device names: which spellings name a device, their canonical form, and resolving them
against this machine (errors say which device was asked for)."""

from __future__ import annotations

import re

import pytest
import torch

from rbfkm_engine.device import (
    DEVICE_HELP,
    DEVICE_KINDS,
    DEVICE_PATTERN,
    canonical_device,
    cuda_count,
    is_available,
    is_device_name,
    resolve_device,
)

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="expects a machine without CUDA")


@pytest.mark.parametrize("name", (*DEVICE_KINDS, "cuda:0", "cuda:1", "cuda:15", "cuda:007"))
def test_device_names(name: str) -> None:
    assert is_device_name(name)


@pytest.mark.parametrize(
    "name", ("gpu", "CPU", "Cuda", "cuda:", "cuda:-1", "cuda:x", "cuda:0 ", " cpu", "mps", "")
)
def test_not_device_names(name: str) -> None:
    assert not is_device_name(name)


@pytest.mark.parametrize("name", ("cuda:\u0663", "cuda:\uff11", "cuda:1\u0663"))
def test_a_device_index_is_ascii_digits(name: str) -> None:
    """Python's `\\d` takes any script's digits; JSON Schema's (the API's document) does not."""
    assert not is_device_name(name)


@pytest.mark.parametrize(
    "name", (*DEVICE_KINDS, "cuda:0", "cuda:15", "gpu", "cuda:", "cuda:x", "cuda:\u0663", "")
)
def test_the_documents_pattern_is_the_spelling_rule(name: str) -> None:
    assert (re.search(DEVICE_PATTERN, name) is not None) == is_device_name(name)


@pytest.mark.parametrize(
    ("name", "canonical"), [("cuda", "cuda:0"), ("cuda:0", "cuda:0"), ("cuda:3", "cuda:3")]
)
def test_canonical_cuda_names(name: str, canonical: str) -> None:
    assert canonical_device(name) == canonical


def test_cpu_is_always_available_and_canonical() -> None:
    assert canonical_device("cpu") == "cpu"
    assert is_available("cpu") and is_available("auto")
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")


@pytest.mark.parametrize("name", ("gpu", "cuda:", "", "mps"))
def test_misspelt_devices_are_not_available(name: str) -> None:
    assert not is_available(name)


@no_cuda
def test_on_a_machine_without_cuda() -> None:
    assert cuda_count() == 0
    assert canonical_device("auto") == "cpu"
    assert resolve_device("auto") == torch.device("cpu")
    for name in ("cuda", "cuda:0", "cuda:1"):
        assert not is_available(name)


@no_cuda
@pytest.mark.parametrize("device", ("cuda", "cuda:0", "cuda:2", torch.device("cuda", 1)))
def test_cuda_requested_without_cuda_names_the_device(device: str | torch.device) -> None:
    with pytest.raises(ValueError, match="CUDA is not available") as caught:
        resolve_device(device)
    assert f"device={device!r}" in str(caught.value)


@pytest.mark.parametrize("device", ("gpu", "cuda:", "CPU", 0, None, 1.5))
def test_resolve_rejects_what_names_no_device(device: object) -> None:
    with pytest.raises(ValueError) as caught:
        resolve_device(device)  # type: ignore[arg-type]
    assert DEVICE_HELP in str(caught.value)
    assert repr(device) in str(caught.value)


def test_resolve_rejects_torch_devices_of_other_kinds() -> None:
    with pytest.raises(ValueError, match="device must be"):
        resolve_device(torch.device("meta"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_machine_with_cuda() -> None:
    count = torch.cuda.device_count()
    assert cuda_count() == count
    assert canonical_device("auto") == "cuda:0"
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cuda:0") == torch.device("cuda:0")
    assert is_available("cuda") and is_available(f"cuda:{count - 1}")
    assert not is_available(f"cuda:{count}")
    with pytest.raises(ValueError, match=rf"device='cuda:{count}': only {count} CUDA device"):
        resolve_device(f"cuda:{count}")
