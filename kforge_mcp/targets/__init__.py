"""Registry of targets. Adding a backend means adding one file here and one prompt template."""

from __future__ import annotations

from ..errors import UnknownTargetError
from .base import Target
from .cuda import CudaTarget
from .cute import CuteTarget
from .metal import MetalTarget
from .triton import TritonTarget

TARGETS: dict[str, Target] = {
    "cuda": CudaTarget(),
    "cute": CuteTarget(),
    "triton": TritonTarget(),
    "metal": MetalTarget(),
}


def get_target(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise UnknownTargetError(f"unknown target '{name}'; known targets: {', '.join(TARGETS)}") from None
