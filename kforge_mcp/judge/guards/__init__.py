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

from kforge_mcp.judge.guards.outputs import (
    _tensors,
    buffer_findings,
    buffers,
    degenerate_findings,
    inputs_mutated,
    output_findings,
    poison_free_device_memory,
    stream_findings,
)
from kforge_mcp.judge.guards.source import static_findings
from kforge_mcp.judge.guards.timers import patched_timers, timer_snapshot
from kforge_mcp.judge.guards.torch_ops import TorchOpRecorder, torch_op_findings
from kforge_mcp.judge.thread_watch import ThreadWatch  # a guard like the others, kept in a module of its own

__all__ = [
    "ThreadWatch",
    "TorchOpRecorder",
    "_tensors",
    "buffer_findings",
    "buffers",
    "degenerate_findings",
    "inputs_mutated",
    "output_findings",
    "patched_timers",
    "poison_free_device_memory",
    "static_findings",
    "stream_findings",
    "timer_snapshot",
    "torch_op_findings",
]
