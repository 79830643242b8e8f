"""What a candidate's run leaves: its outputs (aliases, lazy tensors, constants), its inputs and buffers
(mutated), freed device memory (poisoned), work on another stream."""

from __future__ import annotations

from kforge_mcp.core.schemas import Finding
from kforge_mcp.devices.device import get_device
from kforge_mcp.judge.correctness import flatten_outputs


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
