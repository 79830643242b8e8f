"""What each unit of a split build includes first: the host unit's prelude (full or lean), the bindings' (slim,
lean or full), the device unit's (only what its kernels use); and whether a failed device unit failed on the
candidate's own code."""

from __future__ import annotations

import re

PRELUDE = """// kforge: what the host unit needs before the candidate's own text (precompiled when ready)
#pragma once
#include <torch/types.h>
#include <torch/extension.h>
#include <cuda.h>
#include <cuda_runtime.h>
// what torch's headers bring under nvcc (c10's Half and BFloat16 include them when __CUDACC__ is set)
#include <cuda_fp16.h>
#include <cuda_bf16.h>
// how nvcc lowers k<<<grid, block, smem, stream>>>(args): push the configuration, call k's stub
extern "C" unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim = 1, size_t sharedMem = 0,
                                                struct CUstream_st *stream = 0);
// nvcc's C++ overloads that take a kernel; a plain C++ compiler sees only the const void* forms
template <class T> inline cudaError_t cudaFuncSetAttribute(T *entry, cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute((const void *)entry, attr, value);
}
template <class T> inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *attr, T *entry) {
  return ::cudaFuncGetAttributes(attr, (const void *)entry);
}
template <class T>
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, T *func, int block, size_t smem) {
  return ::cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, (const void *)func, block, smem);
}
"""


# torch/extension.h = torch/all.h (the C++ frontend: nn, optim, data, jit...) + torch/python.h (pybind11).
# Each unit first gets the least it is likely to need; a unit that needs more fails there and is compiled
# again with the full header. The host functions get torch/types.h (ATen, TORCH_CHECK). The bindings
# (main.cpp) get, when cpp_sources only declares functions (what KernelBench candidates do), Tensor and
# pybind11 with torch's type casters; otherwise torch/python.h. The lean preludes are what gets
# precompiled: a lean header, precompiled, compiles several times faster than torch/extension.h, and the
# slim bindings about twice as fast as torch/python.h (bench/host_header_options.py measures each option).
FULL_BINDINGS_HEADER = "#include <torch/extension.h>"


LEAN_BINDINGS_HEADER = "#include <torch/python.h>"


LEAN_HOST_HEADER = "#include <torch/types.h>"


LEAN_PRELUDE = PRELUDE.replace("#include <torch/extension.h>\n", "")


BINDINGS_PRELUDE = (
    "// kforge: what the bindings need (precompiled when ready)\n#pragma once\n" + LEAN_BINDINGS_HEADER + "\n"
)


# Every pybind11 type caster torch/extension.h brings is in torch/csrc/utils/pybind.h (a test compares the
# two with g++ -M on the installed torch), so declared functions are bound alike; a declaration naming
# more than these fails to compile and gets the full header.
SLIM_BINDINGS_PRELUDE = """// kforge: what bindings of declared functions need (precompiled when ready)
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/Exceptions.h>
namespace torch {
using namespace at;
}
"""


SLIM_BINDINGS_HEADER = "#include <ATen/core/Tensor.h> + <torch/csrc/utils/pybind.h>"


PCH_PRELUDES = {"bindings": SLIM_BINDINGS_PRELUDE, "bindings-python": BINDINGS_PRELUDE, "host": LEAN_PRELUDE}


PREWARMED = ("bindings", "host")  # what most candidates build with; bindings-python is built when first used


_EXTENSION_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"]torch/extension\.h[>\"][ \t]*$", re.M)


# what load_inline appends to cpp_sources when it is given ``functions``
_GENERATED_MODULE = re.compile(r"\nPYBIND11_MODULE\(TORCH_EXTENSION_NAME, m\) \{\n(?:m\.def\([^\n]*\);\n)*\}\s*\Z")


_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def bindings_unit(main_cpp: str) -> tuple[str | None, str, str]:
    """(lean prelude or None for the full header, main.cpp to compile, the header it stands for).
    Line numbers are kept, so the compiler's messages still point at the candidate's lines."""
    if not main_cpp.startswith(FULL_BINDINGS_HEADER + "\n"):
        return None, main_cpp, FULL_BINDINGS_HEADER
    module = _GENERATED_MODULE.search(main_cpp)
    declared = main_cpp[len(FULL_BINDINGS_HEADER) : module.start()] if module else "{"
    if "{" not in _COMMENT.sub("", declared):  # declarations only: no body that could call more of torch
        mark = "// kforge: torch/extension.h left out; the bindings prelude declares what this needs"
        return (
            "bindings",
            mark + _EXTENSION_INCLUDE.sub(mark, main_cpp[len(FULL_BINDINGS_HEADER) :]),
            SLIM_BINDINGS_HEADER,
        )
    return "bindings-python", main_cpp.replace(FULL_BINDINGS_HEADER, LEAN_BINDINGS_HEADER, 1), LEAN_BINDINGS_HEADER


# What the device unit gets of what torch's headers give device code under nvcc (load_inline's cuda.cu
# always starts with torch/types.h), each where the kernels use it (a header costs the kernel-edit
# rebuild time): cuda_fp16.h, cuda_bf16.h, c10's macros (C10_DEVICE, C10_LAUNCH_BOUNDS_1), and c10's
# scalar types where kernels take them (template kernels dispatched on at::Half, at::BFloat16), the same
# types the host unit's stub calls name, so the symbols match.
DEVICE_PRELUDES = [
    (re.compile(r"half"), "#include <cuda_fp16.h>\n"),
    (re.compile(r"bfloat16"), "#include <cuda_bf16.h>\n"),
    (re.compile(r"\bC10_"), "#include <c10/macros/Macros.h>\n"),
    (
        re.compile(r"\b(at|c10)::(Half|BFloat16)\b"),
        "#include <c10/util/Half.h>\n#include <c10/util/BFloat16.h>\n"
        "namespace at {\nusing c10::BFloat16;\nusing c10::Half;\n}\n",
    ),
]


def device_prelude(device_source: str) -> str:
    """What the device unit includes first ('' when nothing)."""
    parts = [text for pattern, text in DEVICE_PRELUDES if pattern.search(device_source)]
    return "// kforge: what torch's headers give these kernels\n#pragma once\n" + "".join(parts) if parts else ""


# names the device unit lacks (torch's headers are left out of it): an error about them may be the split's
NOT_IN_DEVICE_UNIT = re.compile(r"\b(torch|at|c10|TORCH_\w*|AT_\w*|C10_\w*|Tensor|pybind11|py)\b")


def candidate_errors(output: str, file: str) -> bool:
    """Whether a failed device unit failed on the candidate's own code: every error is at a line of the
    candidate's file and none names something only torch's headers declare."""
    from kforge_mcp.targets.cuda.nvcc import parse_compiler_output

    errors = [r for r in parse_compiler_output(output) if r.severity == "error"]
    return bool(errors) and all(r.file == file and not NOT_IN_DEVICE_UNIT.search(r.message) for r in errors)
