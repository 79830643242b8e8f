"""What measuring the paths on one instance costs on a CPU (counted on the meta device at CPU_RATES), and the
worker's peak memory while it runs."""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from kforge_mcp.judge.precision_paths.emulation import PATH_SPECS

PLAN_S = 12.0  # a reduced instance is sized to measure every path in this long at CPU_RATES, weights' splits aside


MEMORY_BYTES = 256 * 2**20  # and to make at most this many bytes of intermediates per forward


# FLOP/s and bytes/s the plan assumes of a CPU: the slow end of what 2 busy cores gave (a GEMM 8-17 GFLOP/s,
# convolutions 1-20, transposed ones 0.2-7, element-wise work about 1 GB/s, a part of a split 0.25-0.4 GB/s)
CPU_RATES = {"matmul": 8e9, "convolution": 1.5e9, "conv_transpose": 1e9, "bytes": 1e9, "split": 2.5e8}


def _work_counter(model):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import conv_flop_count

    aten = torch.ops.aten
    convolutions = {aten.convolution.default, aten._convolution.default}
    products = {aten.mm, aten.bmm, aten.mv, aten.dot, aten.convolution, aten._convolution}
    with_bias = {aten.addmm, aten.baddbmm, aten.addmv, aten.addbmm}
    kept = {id(t) for t in [*model.parameters(), *model.buffers()]}

    class WorkCounter(TorchDispatchMode):
        """What a forward makes and reads, for its cost on a CPU: bytes of every tensor it makes (views aside;
        more than it holds at once), its convolutions' FLOPs (direct and transposed apart: a CPU runs them at
        different rates), and the bytes of its products' operands that change per forward (what each path rounds
        or splits every time; a parameter's parts are kept, Splits)."""

        def __init__(self) -> None:
            super().__init__()
            self.bytes = 0
            self.conv_flops = {False: 0, True: 0}
            self.operand_bytes = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func in convolutions:
                transposed = bool(args[6])
                self.conv_flops[transposed] += conv_flop_count(args[0].shape, args[1].shape, out.shape, transposed)
            packet = func.overloadpacket
            if packet in products or packet in with_bias:
                for t in args[1:3] if packet in with_bias else args[:2]:
                    if isinstance(t, torch.Tensor) and id(t) not in kept and id(t._base) not in kept:
                        self.operand_bytes += t.numel() * t.element_size()
            if not func.is_view:
                for t in out if isinstance(out, (list, tuple)) else [out]:
                    if isinstance(t, torch.Tensor):
                        self.bytes += t.numel() * t.element_size()
            return out

    return WorkCounter()


@dataclass(frozen=True)
class Plan:
    """What measuring the paths on one instance is expected to cost on a CPU at CPU_RATES."""

    product_s: float  # one forward's matrix products and convolutions
    rest_s: float  # everything else of one forward
    operand_s: float  # one part of a rounding or split of its products' operands that change per forward
    intermediates: float  # bytes one forward makes

    def forward_s(self, path: str | None = None) -> float:
        """One forward, the reference's (``path`` None) or emulated on ``path``: a product per term (fp32's in
        fp64, at half the rate) and its operands rounded or split into parts."""
        spec = PATH_SPECS.get(path or "")
        if spec is None:
            return self.rest_s + self.product_s
        fp64 = spec.base == "fp32"
        terms = len(spec.terms) * (2 if fp64 else 1)
        return self.rest_s + self.product_s * terms + self.operand_s * (2 if fp64 else sum(spec.parts))

    def seconds(self, paths: list[str], seeds: int) -> float:
        """Every path on ``seeds`` input sets, after the reference on each: what a smaller instance makes cheaper
        (the parameters' splits, once per format, are not: a reduction cannot pay for them)."""
        return seeds * (self.forward_s() + sum(self.forward_s(p) for p in paths))


def plan(model, inputs) -> Plan:
    """The cost of ``model`` on ``inputs`` (on the meta device: counted, not run)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    flops, work = FlopCounterMode(display=False), _work_counter(model)
    with torch.no_grad(), flops, work:
        model(*inputs)
    direct, transposed = work.conv_flops[False], work.conv_flops[True]
    rest = max(0.0, flops.get_total_flops() - direct - transposed)  # matmul, attention
    product_s = (
        rest / CPU_RATES["matmul"] + direct / CPU_RATES["convolution"] + transposed / CPU_RATES["conv_transpose"]
    )
    return Plan(
        product_s=product_s,
        rest_s=work.bytes / CPU_RATES["bytes"],
        operand_s=work.operand_bytes / CPU_RATES["split"],
        intermediates=float(work.bytes),
    )


class PeakRSS:
    """This process's peak resident memory while the block runs, sampled from /proc every 20 ms (the pool's
    memory cap watches the same figure)."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="kforge-peak-rss", daemon=True)

    def _sample(self) -> None:
        page = os.sysconf("SC_PAGE_SIZE")
        while True:
            with contextlib.suppress(OSError, ValueError, IndexError):
                self.peak = max(self.peak, int(Path("/proc/self/statm").read_text().split()[1]) * page)
            if self._stop.wait(0.02):
                return

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _plan_of(problem) -> Plan | None:
    """The plan of the problem as it stands (reduced or not), None where it cannot be built on the meta device."""
    from kforge_mcp.core.reduced import meta_instance

    try:
        cost = plan(*meta_instance(problem))
    except Exception:  # noqa: BLE001  (data-dependent code: each path's time is then guessed from its terms)
        return None
    return cost if cost.forward_s() > 0 else None
