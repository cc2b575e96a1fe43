"""Device names and their resolution: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:N"``.

The one definition of which spellings name a device. Checking a spelling needs no torch
(the service's API validates job requests with it); resolving a name against the machine
does.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: Names that are not a CUDA device index.
DEVICE_KINDS = ("auto", "cpu", "cuda")
#: What a device may be, in words.
DEVICE_HELP = "'auto' (CUDA when there is one), 'cpu', 'cuda' or 'cuda:N'"

#: The spellings as a pattern of JSON Schema (ECMA-262), for the API's document; `[0-9]`,
#: not `\d`, in both, which in Python would take any script's digits (`cuda:٣`).
DEVICE_PATTERN = "^(auto|cpu|cuda|cuda:[0-9]+)$"

_CUDA_INDEX = re.compile(r"cuda:([0-9]+)")


def is_device_name(name: str) -> bool:
    """Whether ``name`` spells a device (whether this machine has it or not)."""
    return name in DEVICE_KINDS or _CUDA_INDEX.fullmatch(name) is not None


def cuda_count() -> int:
    """CUDA devices on this machine (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def canonical_device(name: str) -> str:
    """One spelling per device of this machine: ``auto`` -> ``cuda:0`` when there is a GPU
    (else ``cpu``), ``cuda`` -> ``cuda:0``; other names unchanged."""
    if name == "auto":
        return "cuda:0" if cuda_count() else "cpu"
    return "cuda:0" if name == "cuda" else name


def is_available(name: str) -> bool:
    """Whether this machine can run on the device ``name``."""
    if name in ("auto", "cpu"):
        return True
    if not is_device_name(name):
        return False
    count = cuda_count()
    match = _CUDA_INDEX.fullmatch(name)
    return count > 0 and (match is None or int(match.group(1)) < count)


def resolve_device(device: str | torch.device) -> torch.device:
    """The ``torch.device`` to fit on; ``"auto"`` is the first CUDA device when there is one.

    Raises ``ValueError`` for a spelling that names no device or a device this machine
    lacks, saying which devices it has.
    """
    import torch

    if isinstance(device, torch.device):
        name = str(device)
    elif isinstance(device, str) and is_device_name(device):
        name = device
    else:
        raise ValueError(f"device must be {DEVICE_HELP}, got {device!r}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(name)
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device={device!r} was requested but CUDA is not available")
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise ValueError(
                f"device={device!r}: only {torch.cuda.device_count()} CUDA device(s) present"
            )
    elif resolved.type != "cpu":
        raise ValueError(f"device must be {DEVICE_HELP}, got {device!r}")
    return resolved
