"""Registry of targets. Adding a backend means adding one file here and one prompt template."""

from __future__ import annotations

from ..errors import UnknownTargetError
from .base import PlannedTarget, Target
from .triton import TritonTarget

_NOT_BUILT = "not built yet in this version of kforge-mcp"

TARGETS: dict[str, Target] = {
    "cuda": PlannedTarget("cuda", "CUDA C++ through torch.utils.cpp_extension.load_inline", _NOT_BUILT),
    "cute": PlannedTarget("cute", "CuTe DSL (nvidia-cutlass-dsl) and CuTe C++ headers", _NOT_BUILT),
    "triton": TritonTarget(),
    "metal": PlannedTarget("metal", "Metal Shading Language through torch.mps.compile_shader", _NOT_BUILT),
}


def get_target(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise UnknownTargetError(f"unknown target '{name}'; known targets: {', '.join(TARGETS)}") from None
