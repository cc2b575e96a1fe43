"""Settings from the environment: the device is checked against the engine's names."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rbfkm_engine.device import DEVICE_HELP
from service.settings import Settings


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:1"])
def test_device_names(device: str) -> None:
    assert Settings(device=device).device == device


@pytest.mark.parametrize("device", ["tpu", "gpu", "cuda:x", ""])
def test_a_misspelt_device_stops_the_service_at_start(device: str) -> None:
    with pytest.raises(ValidationError, match="cuda:N"):
        Settings(device=device)
    assert DEVICE_HELP in Settings.model_fields["device"].description
