"""Compute paths measured on the problem. The reference runs on the CPU with its matrix products and
convolutions done the way each path does them (operands rounded to the path's format, or split into
parts whose products are summed in fp32, as a tensor core accumulates), on the problem's own inputs.
Each path's max error, as a fraction of the tolerance verify applies (|a - b| <= atol + rtol |b|),
says whether a kernel on that path can pass. This measures numerics, not speed: the rate of a path is
its format's peak over its number of products (roofline/paths.py). The bound uses the fastest path whose
max error stays within MARGIN of the tolerance.

Splits: x = hi + lo with hi = round(x), lo = round(x - hi) (and a third part for bf16x6).
bf16x3 sums hi*hi + hi*lo + lo*hi, 3xtf32 the same in TF32 (CUTLASS's 3xTF32), bf16x6 splits in
three (hi + mid + lo) and sums hi*hi, hi*mid, mid*hi, mid*mid, hi*lo and lo*hi (Triton's
input_precision='bf16x6'); bf16x2 and fp16x2
split one operand only (hi*b + lo*b, after Markidis et al.'s refinement of one side), the one whose
rounding loses more. fp8 is e4m3 with a power-of-two per-tensor scale. fp32 is the FMA pipe: each
product computed in fp64 and rounded once to fp32, an ideal fp32 kernel.

Bounded memory and time: the reference runs on a reduced instance of the problem (core/reduced.py: the batch,
then the spatial sizes shrunk, channels, features and kernels kept) planned to take PLAN_S at CPU_RATES and
MEMORY_BYTES of intermediates, and measuring stops at the budget (BUDGET_S): the paths left are reported as not
measured, fastest first so the ones left matter least. The max over fewer elements is smaller: each path's max is
scaled up by sample_factor(full, reduced), the ratio of the medians of the max of that many |normal| draws, times
the share of its error that varies between two input sets (varying_share: a weight's rounding seen through a
mean over many pixels is the same for every sample, and more samples do not raise its max).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist

from pydantic import BaseModel, Field

from kforge_mcp.core.reduced import Reduction
from kforge_mcp.core.requests import RooflineRequest
from kforge_mcp.core.schemas import Convolution, Lever

# A path passes when its max error is at most this fraction of the tolerance: verify draws fresh inputs for
# every trial and the GPU sums in another order, so a path at 0.9 of the tolerance here can fail there.
MARGIN = 0.5
SEEDS = (1, 2)  # input sets measured; the weights are drawn under seed 0
BUDGET_S = 30.0  # measuring stops here (the paths left are reported unmeasured): a call answers within a minute
PLAN_S = 12.0  # a reduced instance is sized to measure every path in this long at CPU_RATES, weights' splits aside
MEMORY_BYTES = 256 * 2**20  # and to make at most this many bytes of intermediates per forward
# FLOP/s and bytes/s the plan assumes of a CPU: the slow end of what 2 busy cores gave (a GEMM 8-17 GFLOP/s,
# convolutions 1-20, transposed ones 0.2-7, element-wise work about 1 GB/s, a part of a split 0.25-0.4 GB/s)
CPU_RATES = {"matmul": 8e9, "convolution": 1.5e9, "conv_transpose": 1e9, "bytes": 1e9, "split": 2.5e8}


@dataclass(frozen=True)
class PathSpec:
    name: str
    base: str  # the format whose tensor-core (or FMA) peak the products run at
    parts: tuple[int, int]  # parts the two operands split into: (2, 1) splits one side only
    terms: tuple[tuple[int, int], ...]  # products summed, smallest first: (part of a, part of b)
    how: str


PATH_SPECS = {
    s.name: s
    for s in (
        PathSpec("fp8", "fp8", (1, 1), ((0, 0),), "e4m3 operands, per-tensor scale"),
        PathSpec("fp16", "fp16", (1, 1), ((0, 0),), "fp16 operands"),
        PathSpec("bf16", "bf16", (1, 1), ((0, 0),), "bf16 operands"),
        PathSpec("tf32", "tf32", (1, 1), ((0, 0),), "TF32 operands (10-bit mantissa)"),
        PathSpec("fp16x2", "fp16", (2, 1), ((1, 0), (0, 0)), "one operand split in two fp16 parts: hi*b + lo*b"),
        PathSpec("bf16x2", "bf16", (2, 1), ((1, 0), (0, 0)), "one operand split in two bf16 parts: hi*b + lo*b"),
        PathSpec("bf16x3", "bf16", (2, 2), ((1, 0), (0, 1), (0, 0)), "bf16 hi + lo: hi*hi + hi*lo + lo*hi"),
        PathSpec(
            "3xtf32", "tf32", (2, 2), ((1, 0), (0, 1), (0, 0)), "TF32 big + small: big*big + big*small + small*big"
        ),
        PathSpec(
            "bf16x6",
            "bf16",
            (3, 3),
            ((2, 0), (0, 2), (1, 1), (1, 0), (0, 1), (0, 0)),
            "bf16 hi + mid + lo: the six products down to 2^-16 of hi*hi",
        ),
        PathSpec("fp32", "fp32", (1, 1), ((0, 0),), "fp32 FMA (each product exact, rounded once)"),
        PathSpec("fp64", "fp64", (1, 1), ((0, 0),), "fp64"),
    )
}


class MeasuredPaths(BaseModel):
    """What one problem's reference gives at one tolerance: its counts for the roofline and each path's error."""

    flops: float
    bytes: float
    out_bytes: float | None = Field(None, description="bytes of the outputs alone (the write no kernel avoids)")
    dtype: str = "fp32"
    precision: str | None = Field(None, description="the precision that judges it (as verify resolves it)")
    atol: float | None = None
    rtol: float | None = None
    errors: dict[str, float | None] = Field(
        default_factory=dict,
        description="path -> max |emulated - reference| / (atol + rtol |reference|) over the outputs and input "
        "sets; None: not finite (the path overflows or gives NaN)",
    )
    products: int = Field(0, description="matrix products and convolutions the reference does per forward")
    flops_by_op: dict[str, float] = Field(default_factory=dict, description="FLOPs by op: matmul, convolution, ...")
    convs: list[Convolution] = Field(default_factory=list, description="the convolutions' geometry and FLOPs")
    levers: list[Lever] = Field(
        default_factory=list, description="levers of the reference's structure, read in the same worker"
    )
    not_emulated: list[str] = Field(default_factory=list, description="ops with FLOPs the emulation leaves alone")
    seeds: list[int] = Field(default_factory=list)
    margin: float = MARGIN
    unmeasured: dict[str, str] = Field(
        default_factory=dict, description="path -> why it was not measured (the time budget); judged by rounding"
    )
    reduction: Reduction | None = Field(None, description="the instance measured: reduced sizes and shapes, or why not")
    scaled_by: dict[str, float] = Field(
        default_factory=dict,
        description="path -> what its max error on the reduced instance was multiplied by to predict the full "
        "problem's (more elements give a larger max: sample_factor times the share of the error that varies)",
    )
    budget_s: float = BUDGET_S
    peak_rss_bytes: int | None = Field(
        None, description="the worker's peak resident memory while measuring (sampled every 20 ms)"
    )
    seconds: float = Field(0.0, description="the measurement's time in the worker")
    cached: bool = Field(False, description="read from the cache under the home, not measured by this call")
    notes: list[str] = Field(default_factory=list)


def code_digest() -> str:
    """This module's, the roofline's and the levers' code: a change to any makes earlier measurements stale."""
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in [here / "precision_paths.py", here / "structure.py", *sorted((here / "roofline").glob("*.py"))]:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


# ---- rounding and splitting (torch imported lazily: the server imports this module for its models) ----


def round_to(x, fmt: str):
    """x rounded to ``fmt`` and back to fp32."""
    import torch

    x = x.float()
    if fmt == "bf16":
        return x.to(torch.bfloat16).float()
    if fmt == "fp16":
        return x.to(torch.float16).float()
    if fmt == "tf32":  # round to nearest (ties away) on the 10-bit mantissa, as cvt.rna.tf32.f32
        return ((x.view(torch.int32) + 0x1000) & -0x2000).view(torch.float32)
    if fmt == "fp8":  # e4m3 (3-bit mantissa, subnormal step 2^-9, max 448) after a power-of-two scale
        amax = float(x.abs().max()) if x.numel() else 0.0
        scale = 2.0 ** math.floor(math.log2(448.0 / amax)) if 0.0 < amax < float("inf") else 1.0
        y = x * scale
        normal = ((y.view(torch.int32) + 0x80000) & -0x100000).view(torch.float32)  # torch's own cast is slow
        sub = torch.round(y * 512.0) / 512.0
        return torch.where(y.abs() < 2.0**-6, sub, normal).clamp(-448.0, 448.0) / scale
    raise ValueError(f"no rounding for {fmt}")


def split(x, fmt: str, parts: int, have: list | None = None) -> list:
    """x as ``parts`` summands in ``fmt`` (continuing ``have``, the first of them); fp64: x itself in fp64."""
    if fmt == "fp64":
        return [x.double()]
    out, rest = list(have or []), x.float()
    for p in out:
        rest = rest - p
    while len(out) < parts:
        p = round_to(rest, fmt)
        out.append(p)
        rest = rest - p
    return out


class Splits:
    """The parts of the tensors that stay the same between forwards (parameters and buffers), kept: a weight is
    split once per format rather than once per path and input set (an 8192 x 8192 weight takes about a second a
    part on 2 busy cores). ``drop`` frees a format no later path uses."""

    def __init__(self, tensors=()) -> None:
        self.kept = {t.data_ptr() for t in tensors}
        self.parts: dict[tuple, list] = {}
        self.residuals: dict[tuple, float] = {}

    @staticmethod
    def _key(x, fmt: str) -> tuple:
        return (x.data_ptr(), tuple(x.shape), tuple(x.stride()), x.dtype, fmt)

    def split(self, x, fmt: str, parts: int) -> list:
        if x.data_ptr() not in self.kept:
            return split(x, fmt, parts)
        key = self._key(x, fmt)
        have = self.parts.get(key, [])
        if len(have) < parts:
            self.parts[key] = have = split(x, fmt, parts, have)
        return have[:parts]

    def residual(self, x, fmt: str) -> float:
        """|x - round(x)| / |x|: how much one rounding of x to ``fmt`` loses."""
        key = self._key(x, fmt)
        if key not in self.residuals:
            x32 = x.float()
            norm = float(x32.norm())
            loss = float((x32 - self.split(x, fmt, 1)[0]).norm()) / norm if norm else 0.0
            if x.data_ptr() not in self.kept:
                return loss
            self.residuals[key] = loss
        return self.residuals[key]

    def drop(self, fmt: str) -> None:
        self.parts = {k: v for k, v in self.parts.items() if k[-1] != fmt}


def emulate_product(spec: PathSpec, product, a, b, splits: Splits | None = None):
    """``product(a, b)`` (a bias-free mm, bmm, mv or convolution) done on ``spec``'s path; ``splits`` keeps the
    parts of tensors that recur."""
    if not (a.is_floating_point() and b.is_floating_point()):
        return product(a, b)
    splits = splits or Splits()
    out_dtype = a.dtype
    if spec.base in ("fp32", "fp64"):
        return product(splits.split(a, "fp64", 1)[0], splits.split(b, "fp64", 1)[0]).to(out_dtype)
    na, nb = spec.parts
    terms = spec.terms
    if (na, nb) == (2, 1) and splits.residual(b, spec.base) > splits.residual(a, spec.base):
        na, nb, terms = 1, 2, tuple((j, i) for i, j in terms)  # split the side whose rounding loses more
    pa, pb = splits.split(a, spec.base, na), splits.split(b, spec.base, nb)
    (i, j), *rest = terms
    acc = product(pa[i], pb[j])
    for i, j in rest:  # smallest first, hi*hi last
        acc = acc + product(pa[i], pb[j])
    return acc.to(out_dtype)


def _mode_class():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    plain = {aten.addmm.default: aten.mm.default, aten.baddbmm.default: aten.bmm.default}
    plain[aten.addmv.default] = aten.mv.default
    products = {aten.mm.default, aten.bmm.default, aten.mv.default, aten.dot.default}
    with_bias = set(plain) | {aten.addbmm.default}
    # ops whose FLOPs the roofline counts but the emulation leaves alone (named in the notes)
    counted = {
        getattr(aten, op).default: "scaled_dot_product_attention"
        for op in ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_attention_math")
        if hasattr(aten, op)
    }

    class EmulatedPath(TorchDispatchMode):
        """Every matrix product and convolution done on one path; everything else as it is."""

        def __init__(self, spec: PathSpec, splits: Splits | None = None):
            super().__init__()
            self.spec, self.count, self.splits = spec, 0, splits
            self.skipped: set[str] = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func in products:
                self.count += 1
                return emulate_product(self.spec, lambda x, y: func(x, y), args[0], args[1], self.splits)
            if func in with_bias:
                self.count += 1
                base, a, b = args[:3]
                beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
                if func is aten.addbmm.default:
                    prod = emulate_product(self.spec, lambda x, y: aten.bmm.default(x, y).sum(0), a, b, self.splits)
                else:
                    prod = emulate_product(self.spec, lambda x, y: plain[func](x, y), a, b, self.splits)
                out = prod * alpha if alpha != 1 else prod
                return out + base * beta if beta != 0 else out
            if func in (aten.convolution.default, aten._convolution.default):  # direct and transposed alike
                self.count += 1
                x, w, bias, *rest = args
                out = emulate_product(self.spec, lambda p, q: func(p, q, None, *rest), x, w, self.splits)
                if bias is not None:
                    out = out + bias.view(1, -1, *([1] * (out.dim() - 2))).to(out.dtype)
                return out
            if func in counted:
                self.skipped.add(counted[func])
            return func(*args, **kwargs)

    return EmulatedPath


def error_fractions(expected, got, atol: float | None, rtol: float | None):
    """(got - expected) / (atol + rtol |expected|) at every element of every floating output, in one flat fp64
    tensor (0 where the reference is not finite), each output at the tolerance verify gives its dtype when none is
    set; None when the path is not finite where the reference is."""
    import torch

    from kforge_mcp.judge.correctness import flatten_outputs, tolerance_for

    parts = []
    for e, g in zip(flatten_outputs(expected), flatten_outputs(got), strict=True):
        if not (isinstance(e, torch.Tensor) and e.is_floating_point()) or e.numel() == 0:
            continue
        atol, rtol = tolerance_for(e.dtype, atol, rtol)
        e64, g64 = e.double(), g.double()
        ok = torch.isfinite(e64)
        if bool((~torch.isfinite(g64) & ok).any()):
            return None
        diff = torch.where(ok, g64 - e64, 0.0)
        parts.append(torch.where(diff == 0, 0.0, diff / (atol + rtol * e64.abs())).flatten())  # a zero tolerance: inf
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def _floating(t) -> bool:
    import torch

    return isinstance(t, torch.Tensor) and t.is_floating_point()


def error_fraction(expected, got, atol: float | None, rtol: float | None) -> float | None:
    """max |got - expected| / (atol + rtol |expected|) over every floating output; None when not finite."""
    f = error_fractions(expected, got, atol, rtol)
    return None if f is None else float(f.abs().max()) if f.numel() else 0.0


def varying_share(a, b) -> float:
    """The share of two input sets' error fractions (``a``, ``b``: the same elements) that changes with the inputs:
    rms(a - b) / sqrt(2) over the rms of both. Near 0 where the error is the same for any input (a weight's
    rounding seen through a mean over many pixels), 1 where the two are independent."""
    total = float(((a * a).mean() + (b * b).mean()) / 2) ** 0.5
    varying = float(((a - b) ** 2).mean() / 2) ** 0.5
    return min(1.0, varying / total) if total > 0 and math.isfinite(total) and math.isfinite(varying) else 1.0


# the compute paths open to a problem of each dtype, slowest first
PATHS_FOR = {
    "fp64": ("fp64",),
    "fp32": ("fp32", "bf16x6", "3xtf32", "bf16x3", "fp16x2", "bf16x2", "tf32", "fp16", "bf16", "fp8"),
    "bf16": ("bf16", "fp8"),
    "fp16": ("fp16", "fp8"),
    "fp8": ("fp8",),
}


def paths_for(dtype: str) -> tuple[str, ...]:
    return PATHS_FOR.get(dtype, (dtype,))


def sample_factor(full: int, reduced: int) -> float:
    """How much larger the max of |error| over ``full`` elements is expected than over ``reduced`` of them: the
    ratio of the medians of the max of that many |normal| draws (x with P(|Z| <= x)^n = 1/2). 1 when none are cut."""
    if reduced <= 0 or full <= reduced:
        return 1.0

    def median_max(n: int) -> float:
        return NormalDist().inv_cdf((1 + 0.5 ** (1 / n)) / 2)

    return median_max(full) / median_max(reduced)


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


def _split_format(path: str) -> str:
    """The format a path's operands are rounded or split to (fp32's FMA: fp64, exact products)."""
    base = PATH_SPECS[path].base
    return "fp64" if base == "fp32" else base


def _plan_of(problem) -> Plan | None:
    """The plan of the problem as it stands (reduced or not), None where it cannot be built on the meta device."""
    from kforge_mcp.core.reduced import meta_instance

    try:
        cost = plan(*meta_instance(problem))
    except Exception:  # noqa: BLE001  (data-dependent code: each path's time is then guessed from its terms)
        return None
    return cost if cost.forward_s() > 0 else None


@dataclass
class _PathRun:
    fractions: list  # each input set's error fractions
    finite: bool = True
    forwards: int = 0
    products: int = 0
    skipped: set[str] = field(default_factory=set)


def _run_path(model, cases: list, mode, judge, last_start: float) -> _PathRun:
    """The reference on each input set with its products on ``mode``'s path, none started after ``last_start``."""
    import torch

    from kforge_mcp.core.problem import seed_everything

    run = _PathRun(fractions=[])
    for seed, inputs, expected in cases:
        if time.perf_counter() > last_start:
            break
        mode.count = 0
        seed_everything(seed)
        with mode:
            got = model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
        run.forwards, run.products, run.skipped = run.forwards + 1, max(run.products, mode.count), mode.skipped
        if not mode.count:
            break
        f = error_fractions(expected, got, judge.atol, judge.rtol)
        if f is None:
            run.finite = False
            break
        run.fractions.append(f)
    return run


def measure_reference(
    problem, req: RooflineRequest, counts, seeds: tuple[int, ...] = SEEDS, budget_s: float = BUDGET_S
) -> MeasuredPaths:
    """In a worker: with the problem's ``counts`` (roofline.count_problem), the error of every path open to
    its dtype, at the tolerance verify would judge it at for ``req`` (precision, atol, rtol), measured on a reduced
    instance of the problem (its full size when that fits) and stopped at ``budget_s``."""
    import torch

    from kforge_mcp.core.problem import reference_model, seed_everything
    from kforge_mcp.core.reduced import reduce_problem, samples_mix
    from kforge_mcp.judge import precision
    from kforge_mcp.judge.correctness import flatten_outputs

    started = time.perf_counter()
    judge = precision.resolve(req, problem)
    dtype = counts.dtype
    # fastest first: what a budget leaves unmeasured is what the bound needs least
    order = [p for p in reversed(paths_for(dtype)) if p in PATH_SPECS and not (p == dtype and p != "fp32")]

    def fits(model, inputs) -> bool:
        cost = plan(model, inputs)
        return cost.seconds(order, len(seeds)) <= PLAN_S and cost.intermediates <= MEMORY_BYTES

    reduction = reduce_problem(problem, fits)
    with reduction.applied(problem):
        model = reference_model(problem, "cpu", 0, judge.dtype)
        mixes = reduction.batch_shrunk and samples_mix(model, judge.cast(problem.make_inputs(seeds[0], "cpu")))
    if mixes:  # statistics over the batch: measured on more samples
        reduction = reduce_problem(problem, fits, batch_mixes=True)
        with reduction.applied(problem):
            model = reference_model(problem, "cpu", 0, judge.dtype)
    growth = sample_factor(reduction.outputs * len(seeds), reduction.reduced_outputs * len(seeds))
    deadline = started + budget_s
    mode_cls = _mode_class()
    errors: dict[str, float | None] = {}
    scaled_by: dict[str, float] = {}
    unmeasured: dict[str, str] = {}
    products, emulated, skipped = 0, 0, set[str]()
    with reduction.applied(problem), torch.no_grad():
        cases, reference_s = [], 0.0
        for seed in seeds:
            inputs = judge.cast(problem.make_inputs(seed, "cpu"))
            seed_everything(seed)
            t0 = time.perf_counter()
            expected = model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
            reference_s = max(reference_s, time.perf_counter() - t0)
            cases.append((seed, inputs, expected))
            if judge.atol is None or judge.rtol is None:
                first = next((t for t in flatten_outputs(expected) if isinstance(t, torch.Tensor)), None)
                if first is not None:
                    judge.settle(first.dtype)
        cost = _plan_of(problem)
        splits = Splits([*model.parameters(), *model.buffers()])
        largest = max(
            (float(t.abs().max()) for *_, e in cases for t in flatten_outputs(e) if _floating(t) and t.numel()),
            default=None,
        )
        vacuous = largest is not None and judge.atol is not None and largest <= judge.atol
        if vacuous:  # every output within atol of zero: any path, zeros too, "passes"; errors cannot rank paths
            within = f"the reference's outputs all sit within atol ({judge.atol:g}) of zero (largest {largest:.3g})"
            unmeasured = {name: within for name in order}
            order = []
        for i, name in enumerate(order):
            spec = PATH_SPECS[name]
            expect_s = reference_s * (cost.forward_s(name) / cost.forward_s() if cost else len(spec.terms))
            run = _run_path(model, cases, mode_cls(spec, splits), judge, deadline - expect_s)
            if _split_format(name) not in {_split_format(p) for p in order[i + 1 :]}:
                splits.drop(_split_format(name))  # no later path rounds to it
            products, skipped = max(products, run.products), skipped | run.skipped
            emulated += run.forwards
            if run.forwards and not products:  # nothing to emulate: every path gives the reference itself
                break
            if run.finite and not run.fractions:
                unmeasured[name] = f"not measured within the {budget_s:g} s budget"
                continue
            share = varying_share(run.fractions[0], run.fractions[1]) if len(run.fractions) > 1 else 1.0
            scaled_by[name] = 1 + share * (growth - 1)
            worst = max(float(f.abs().max()) if f.numel() else 0.0 for f in run.fractions) if run.finite else None
            errors[name] = None if worst is None else worst * scaled_by[name]
    if emulated and not products:
        errors, scaled_by, unmeasured = {}, {}, {}
    notes = [f"paths measured on {reduction.summary()}"]
    if growth > 1 and scaled_by:
        notes.append(
            f"each path's max error scaled for {reduction.outputs} output elements rather than "
            f"{reduction.reduced_outputs}: up to {growth:.3g}x where its error varies with the inputs, less where "
            f"it does not (scaled_by)"
        )
    if vacuous:
        notes.append(f"{within}: a measured error cannot tell one path from another, so each is judged by rounding")
    elif unmeasured:
        notes.append(f"{', '.join(unmeasured)} not measured within the {budget_s:g} s budget: judged by rounding")
    if emulated and not products:
        notes.append("the reference does no matrix product or convolution: every path computes it alike")
    if skipped:
        notes.append(f"not emulated (computed in the problem's dtype): {', '.join(sorted(skipped))}")
    return MeasuredPaths(
        flops=counts.flops,
        bytes=counts.bytes,
        out_bytes=counts.out_bytes,
        dtype=dtype,
        precision=judge.precision,
        atol=judge.atol,
        rtol=judge.rtol,
        errors=errors,
        unmeasured=unmeasured,
        reduction=reduction,
        scaled_by=scaled_by,
        budget_s=budget_s,
        products=products,
        flops_by_op=counts.flops_by_op,
        convs=list(counts.convs),
        not_emulated=sorted(skipped),
        seeds=list(seeds),
        seconds=round(time.perf_counter() - started, 3),
        notes=notes,
    )
