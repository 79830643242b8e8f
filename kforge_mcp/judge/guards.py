"""Guards against kernels that game the verifier. Each guard turns one known cheat into a
finding with a stable code; ``severity`` decides what it does to the verdict.

Cheats (FACTS.md, "How generated kernels cheat") and where each is caught:
- replaying a cached result: fresh inputs every trial, and a re-check after timing
- mutating inputs: ``inputs_mutated`` compares the candidate's inputs with a pristine copy
- outputs aliasing an input, or memory the reference freed: ``output_findings``; the
  candidate runs before the reference in each trial and freed device memory is poisoned
- work on another stream or thread: ``thread_findings``; device-event time against wall time
- patched timers: the timing code binds the real clocks at import; ``patched_timers``
- the PyTorch op instead of a kernel: ``TorchOpRecorder`` plus the target's launch counter
- lazy tensors or Tensor subclasses: ``output_findings``
- the reference's output through the garbage collector: the candidate runs first, earlier
  outputs are collected, and ``static_findings`` flags introspection in the source
- nondeterminism beyond tolerance: the candidate runs twice on the same inputs
"""

from __future__ import annotations

import ast
from typing import Any

from kforge_mcp.core.schemas import Finding
from kforge_mcp.devices.device import get_device
from kforge_mcp.judge.correctness import flatten_outputs
from kforge_mcp.judge.thread_watch import ThreadWatch  # noqa: F401  (a guard like the others, kept in a module of its own)

# torch functions a ModelNew may call around its kernels: allocation, shape and layout.
ALLOWED_TORCH_OPS = {
    "empty",
    "empty_like",
    "empty_strided",
    "zeros",
    "zeros_like",
    "ones",
    "ones_like",
    "full",
    "full_like",
    "arange",
    "tensor",
    "as_tensor",
    "contiguous",
    "view",
    "view_as",
    "reshape",
    "reshape_as",
    "flatten",
    "unflatten",
    "squeeze",
    "unsqueeze",
    "permute",
    "transpose",
    "t",
    "expand",
    "expand_as",
    "narrow",
    "select",
    "__getitem__",
    "size",
    "stride",
    "dim",
    "numel",
    "is_contiguous",
    "data_ptr",
    "__dlpack__",  # a zero-copy export (how CuTe DSL, CuPy and JAX take a torch tensor), not compute
    "__dlpack_device__",
    "element_size",
    "storage_offset",
    "to",
    "cuda",
    "cpu",
    "type",
    "float",
    "half",
    "bfloat16",
    "new_empty",
    "new_zeros",
    "new_ones",
    "new_full",
    "split",
    "chunk",
    "unbind",
    "__len__",
    "__iter__",
    "__hash__",
    "__eq__",
    "__format__",
    "__repr__",
    "get_device",
    "is_floating_point",
    "requires_grad_",
    "detach",
    "__setstate__",
    "__reduce_ex__",
    "shape",
    "dtype",
    "device",
    "is_cuda",
    "data",
    "grad",
    "requires_grad",
    "T",
    "mT",
    "layout",
    "ndim",
    "__get__",
    "_is_view",
    "untyped_storage",
    "storage",
    "copy_",
    "zero_",
    "fill_",
    "__bool__",
    "item",
    "tolist",
}
# Ops that do the heavy work of the problems we judge: calling one instead of a kernel is a cheat.
HEAVY_TORCH_OPS = {
    "matmul",
    "mm",
    "bmm",
    "addmm",
    "baddbmm",
    "linear",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "softmax",
    "log_softmax",
    "layer_norm",
    "group_norm",
    "batch_norm",
    "instance_norm",
    "rms_norm",
    "scaled_dot_product_attention",
    "einsum",
    "tensordot",
    "gelu",
    "silu",
    "relu",
    "sigmoid",
    "tanh",
    "exp",
    "sum",
    "mean",
    "max",
    "min",
    "amax",
    "cumsum",
    "sort",
    "topk",
    "__matmul__",
    "cross_entropy",
    "nll_loss",
    "mse_loss",
    "embedding",
    "avg_pool2d",
    "max_pool2d",
    "interpolate",
}
INTROSPECTION = {"get_objects", "get_referrers", "get_referents", "_getframe", "stack", "currentframe", "settrace"}
INTROSPECTION_MODULES = ("gc", "sys", "inspect", "traceback", "threading")
TIMER_NAMES = (
    "time.perf_counter",
    "time.monotonic",
    "time.time",
    "torch.cuda.synchronize",
    "torch.cuda.Event",
    "torch.cuda.Event.record",
    "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.synchronize",
)


def _resolve(path: str):
    import importlib

    parts = path.split(".")
    obj: Any = importlib.import_module(parts[0])
    for part in parts[1:]:
        obj = getattr(obj, part, None)
    return obj


def timer_snapshot() -> dict[str, object]:
    return {name: _resolve(name) for name in TIMER_NAMES}


def patched_timers(before: dict[str, object]) -> Finding | None:
    changed = [name for name, obj in timer_snapshot().items() if obj is not before[name]]
    if not changed:
        return None
    return Finding(
        code="timer_patched",
        severity="suspicious",
        evidence={"patched": changed},
        message=f"the candidate replaced timing functions: {', '.join(changed)}",
    )


class TorchOpRecorder:
    """Records the torch functions a forward calls, through __torch_function__."""

    def __init__(self):
        from torch.overrides import TorchFunctionMode

        recorder = self

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                name = getattr(func, "__name__", None) or str(func)
                recorder.calls[name] = recorder.calls.get(name, 0) + 1
                return func(*args, **(kwargs or {}))

        self.calls: dict[str, int] = {}
        self._mode = Mode()

    def __enter__(self):
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self._mode.__exit__(*exc)

    def compute_ops(self) -> dict[str, int]:
        return {
            k: v for k, v in self.calls.items() if k.strip("_") not in ALLOWED_TORCH_OPS and k not in ALLOWED_TORCH_OPS
        }


def torch_op_findings(recorder: TorchOpRecorder, launches: int | None) -> list[Finding]:
    findings = []
    compute = recorder.compute_ops()
    heavy = sorted(k for k in compute if k.strip("_").removesuffix("_") in HEAVY_TORCH_OPS)
    if launches == 0:
        findings.append(
            Finding(
                code="no_kernel_launched",
                severity="suspicious",
                evidence={"launches": 0, "torch_ops": compute},
                message="ModelNew.forward launched none of the candidate's own kernels",
            )
        )
    if heavy:
        findings.append(
            Finding(
                code="torch_op_instead_of_kernel",
                severity="suspicious",
                evidence={"torch_ops": {k: compute[k] for k in heavy}},
                message=f"ModelNew.forward calls PyTorch compute ops: {', '.join(heavy)}",
            )
        )
    elif compute:
        findings.append(
            Finding(
                code="torch_compute_in_forward",
                severity="warning",
                evidence={"torch_ops": compute},
                message=f"ModelNew.forward also computes with PyTorch: {', '.join(sorted(compute))}",
            )
        )
    return findings


def introspection_calls(tree: ast.AST) -> set[str]:
    """The introspection names a source reaches through the modules that own them (``sys._getframe``,
    ``inspect.stack``, ``from gc import get_objects``), not any attribute of that name: ``torch.stack`` and
    ``np.stack`` stack tensors."""
    modules = set(INTROSPECTION_MODULES)
    names: dict[str, str] = {}  # local name -> the introspection function it binds
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            modules |= {a.asname or a.name for a in n.names if a.name in INTROSPECTION_MODULES}
        elif isinstance(n, ast.ImportFrom) and n.module in INTROSPECTION_MODULES:
            names |= {a.asname or a.name: a.name for a in n.names if a.name in INTROSPECTION}
    used = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and n.attr in INTROSPECTION:
            root = n.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if not isinstance(root, ast.Name) or root.id in modules:  # a root we cannot place stays suspect
                used.add(n.attr)
        elif isinstance(n, ast.Name) and n.id in names:
            used.add(names[n.id])
    return used


def static_findings(source_text: str) -> list[Finding]:
    """Source-level red flags: introspection that can find the reference's tensors."""
    try:
        tree = ast.parse(source_text)
    except SyntaxError:
        return []
    used = sorted(introspection_calls(tree))
    if not used:
        return []
    return [
        Finding(
            code="introspection",
            severity="suspicious",
            evidence={"calls": used},
            message=f"the candidate inspects the interpreter ({', '.join(used)}): it could find the reference's tensors",
        )
    ]


def _tensors(value) -> list:
    import torch

    return [t for t in flatten_outputs(value) if isinstance(t, torch.Tensor)]


def output_findings(outputs, inputs) -> list[Finding]:
    """Outputs must be plain tensors that own memory of their own."""
    import torch

    findings = []
    input_ptrs = {t.untyped_storage().data_ptr() for t in _tensors(inputs) if t.numel()}
    for i, out in enumerate(_tensors(outputs)):
        if type(out) is not torch.Tensor:
            findings.append(
                Finding(
                    code="output_not_plain_tensor",
                    severity="fail",
                    evidence={"type": type(out).__name__, "output": i},
                    message=f"output {i} is a {type(out).__name__}, not a plain torch.Tensor",
                )
            )
            continue
        if out.numel() and out.untyped_storage().data_ptr() in input_ptrs:
            findings.append(
                Finding(
                    code="output_aliases_input",
                    severity="suspicious",
                    evidence={"output": i},
                    message=f"output {i} shares memory with an input",
                )
            )
    return findings


def inputs_mutated(pristine: list, used: list) -> Finding | None:
    import torch

    changed = [
        i for i, (a, b) in enumerate(zip(pristine, used)) if isinstance(a, torch.Tensor) and not torch.equal(a, b)
    ]
    if not changed:
        return None
    return Finding(
        code="input_mutated",
        severity="suspicious",
        evidence={"inputs": changed},
        message=f"ModelNew.forward changed its inputs {changed}; the reference does not",
    )


def poison_free_device_memory(device: str) -> None:
    """Fill the allocator's cached free memory with NaN and hand it back to the driver, so an
    output that is never written (torch.empty reusing the reference's freed memory) cannot
    pass by luck (where the device can: CUDA)."""
    get_device(device).poison_free_memory()


def degenerate_findings(first, second) -> list[Finding]:
    """A reference whose output is constant, or the same for different inputs, cannot tell a
    kernel from a constant."""
    import torch

    a, b = _tensors(first), _tensors(second)
    if not a:
        return []
    if all(x.numel() and bool((x == x.reshape(-1)[0]).all()) for x in a):
        return [
            Finding(
                code="degenerate_problem",
                severity="warning",
                evidence={"reason": "constant output"},
                message="the reference output is constant for the shipped inputs: a constant would pass",
            )
        ]
    if len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b)):
        return [
            Finding(
                code="degenerate_problem",
                severity="warning",
                evidence={"reason": "independent of inputs"},
                message="the reference output does not change with the inputs: a constant would pass",
            )
        ]
    return []


def stream_findings(fn, device: str) -> Finding | None:
    """Kernels of one forward, from the profiler, by the stream they ran on: a marker kernel
    launched first on the timed stream tells which stream that is. Work on any other stream
    is outside the timed region."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    if not get_device(device).checks_streams:
        return None
    marker = torch.empty(1, device=device)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        marker.fill_(1.0)
        fn()
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA), key=lambda e: e.time_range.start)
    if not kernels:
        return None
    timed = kernels[0].device_resource_id
    elsewhere = sorted({e.name for e in kernels if e.device_resource_id != timed})
    if not elsewhere:
        return None
    return Finding(
        code="work_outside_timed_stream",
        severity="suspicious",
        evidence={"timed_stream": timed, "kernels_elsewhere": elsewhere[:10]},
        message=f"ModelNew.forward runs kernels on another stream ({', '.join(elsewhere[:3])}): "
        "that work is outside the timed region",
    )


def buffers(model) -> dict:
    """A copy of a module's buffers (BatchNorm's running statistics, ...) by name."""
    return {name: b.detach().clone() for name, b in model.named_buffers()}


def buffer_findings(before: dict, reference, candidate, compare) -> list[Finding]:
    """Buffers the reference's forward updated (training-mode BatchNorm) must be updated alike by
    the candidate's; ``compare(expected, got)`` returns a mismatch or None. Buffers the candidate
    does not have under the same name and shape are reported as not compared."""
    import torch

    after = dict(reference.named_buffers())
    changed = [n for n, b in before.items() if n in after and not torch.equal(b, after[n])]
    if not changed:
        return []
    theirs = dict(candidate.named_buffers())
    missing = [n for n in changed if n not in theirs or theirs[n].shape != after[n].shape]
    findings = []
    if missing:
        findings.append(
            Finding(
                code="buffers_not_compared",
                severity="warning",
                evidence={"buffers": missing},
                message=f"the reference's forward updates {', '.join(missing)}; ModelNew has no buffer of that "
                "name and shape, so whether it keeps that state was not checked",
            )
        )
    for name in (n for n in changed if n not in missing):
        mismatch = compare(after[name], theirs[name])
        if mismatch is not None:
            findings.append(
                Finding(
                    code="buffers_differ",
                    severity="fail",
                    evidence={"buffer": name, **mismatch.model_dump(exclude_none=True)},
                    message=f"after one forward, ModelNew's buffer {name} differs from the reference's "
                    f"({mismatch.reason}): its module state is not updated the same way",
                )
            )
            break
    return findings
