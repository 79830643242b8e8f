"""Registry of targets. Adding a backend means adding one file here and one prompt template."""

from __future__ import annotations

from ..errors import UnknownTargetError
from .base import PlannedTarget, Target
from .cuda import CudaTarget
from .cute import CuteTarget
from .triton import TritonTarget

_NOT_BUILT = "not built yet in this version of kforge-mcp"

TARGETS: dict[str, Target] = {
    "cuda": CudaTarget(),
    "cute": CuteTarget(),
    "triton": TritonTarget(),
    "metal": PlannedTarget("metal", "Metal Shading Language through torch.mps.compile_shader", _NOT_BUILT),
}


def get_target(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise UnknownTargetError(f"unknown target '{name}'; known targets: {', '.join(TARGETS)}") from None
