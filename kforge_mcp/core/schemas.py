"""Pydantic models that every layer speaks: tools, engine, workers, CLI.

Workers send these as plain dicts over a pipe; the server validates them back into
models, so a worker that returns garbage is caught at the boundary.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

Severity = Literal["error", "warning", "note"]
Verdict = Literal["pass", "fail", "suspicious", "error"]
JobState = Literal["queued", "running", "done", "failed", "cancelled"]


class Diagnostic(BaseModel):
    """One compiler or loader message, pointing at a line of the submitted source."""

    line: int | None = Field(None, description="1-based line in the submitted source")
    column: int | None = Field(None, description="1-based column in the submitted source")
    severity: Severity = "error"
    message: str
    file: str | None = Field(None, description="file the line refers to (the submitted path or <candidate>)")
    kernel: str | None = Field(None, description="kernel the message belongs to, when known")


class KernelResources(BaseModel):
    """Per-kernel resource use from the compiled binary (cuobjdump / ptxas)."""

    name: str
    config: str | None = Field(
        None, description="the autotune config this build is for (its meta-parameters, warps, stages)"
    )
    registers: int | None = None
    spills: int | None = Field(
        None,
        description="bytes of local memory a thread uses (register spills land there; Triton: stack frame + local)",
    )
    shared_bytes: int | None = None
    stack_bytes: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    mma: Literal["wgmma", "mma.sync", "none"] | None = Field(
        None, description="the tensor-core (MMA) instructions its PTX issues, when the compiler's PTX was read"
    )
    mma_serialized: str | None = Field(
        None, description="why the assembler serialized its MMAs (ptxas C7514/C7515: each waits for the one before)"
    )
    signature: dict[str, str] = Field(default_factory=dict, description="argument types it was compiled for")
    constexprs: dict[str, Any] = Field(default_factory=dict)
    divisible_by_16: list[str] = Field(
        default_factory=list, description="arguments specialised as divisible by 16 (pointers: 16-byte aligned)"
    )


class JobAware(BaseModel):
    """Results of calls that may outlive their wait_s: then only status and job_id are set."""

    status: Literal["done", "running"] = "done"
    job_id: str | None = Field(None, description="set when the call outlived wait_s; poll job_status / job_result")


class CompileReport(JobAware):
    ok: bool
    target: str
    arch: str | None = None
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    kernels: list[KernelResources] = Field(default_factory=list)
    cached: bool = False
    seconds: float = 0.0
    signature_source: str | None = Field(
        None,
        description="where kernel argument types came from: 'traced' (a forward on the problem's inputs) or 'inferred' (static)",
    )
    ptx: dict[str, str] | None = Field(
        None, description="PTX per kernel ('kernel [config]' per autotune config), when asked for"
    )
    sass: dict[str, str] | None = Field(
        None, description="SASS per kernel or extension, when asked for (with emit_ptx)"
    )
    toolchain: dict[str, str] = Field(
        default_factory=dict,
        description="the compiler versions that made this report (e.g. triton, ptxas), on the machine that "
        "compiled it: registers, spills and shared memory can differ under another version",
    )


class TargetStatus(BaseModel):
    name: str
    available: bool
    reason: str | None = Field(None, description="why it is not available here")
    devices: list[str] = Field(default_factory=list, description="devices this target can run on here")
    can_compile: bool = Field(False, description="compile works here even without a device")
    versions: dict[str, str] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    requires: list[str] = Field(
        default_factory=list,
        description="device resources a machine needs to run this target "
        "('metal', 'xpu', 'cuda'), for executors that route jobs to such a machine",
    )
    unavailable_devices: dict[str, str] = Field(
        default_factory=dict, description="device kinds this target supports that are missing here, and what they need"
    )


class ClusterNode(BaseModel):
    """One node of a cluster executor (Ray): what it has and which targets run there."""

    node_id: str
    address: str | None = None
    alive: bool = True
    resources: dict[str, float] = Field(
        default_factory=dict, description="e.g. CPU, GPU, xpu, metal, accelerator_type:H100"
    )
    targets: list[str] = Field(default_factory=list, description="targets available on this node")
    devices: list[str] = Field(default_factory=list, description="devices on this node (node-local names)")
    host: dict[str, str] = Field(default_factory=dict)
    error: str | None = None


class TargetsReport(BaseModel):
    targets: list[TargetStatus]
    host: dict[str, str] = Field(default_factory=dict)
    nodes: list[ClusterNode] = Field(
        default_factory=list, description="with a cluster executor: each node and what it offers"
    )


class Finding(BaseModel):
    code: str = Field(description="stable identifier, e.g. 'interpreter_timing'")
    message: str
    evidence: dict[str, Any] = Field(default_factory=dict)
    severity: Literal["info", "warning", "suspicious", "fail"] = Field(
        "info", description="'suspicious' makes a correct candidate's verdict suspicious; 'fail' makes it fail"
    )


class Mismatch(BaseModel):
    """Where and by how much a candidate's output disagreed with the reference."""

    trial: int
    output_index: int = 0
    reason: str
    max_abs_error: float | None = None
    mean_abs_error: float | None = None
    max_rel_error: float | None = None
    first_mismatch_index: list[int] | None = None
    expected: float | None = None
    got: float | None = None
    mismatched_fraction: float | None = None
    atol: float | None = None
    rtol: float | None = None


class TimingStats(BaseModel):
    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    iqr_ms: float
    spread: float = Field(description="interquartile range over median (0.02 = 2%)")
    samples: int
    clock: str = Field(description="device events, or host monotonic clock")
    cv: float = Field(0.0, description="coefficient of variation: standard deviation over mean")


class Timing(BaseModel):
    candidate: TimingStats | None = None
    eager: TimingStats | None = None
    compiled: TimingStats | None = None


class ComputePath(BaseModel):
    """One way to do the problem's math, and whether it can meet the tolerance."""

    path: str = Field(
        description="fp32 (FMA pipe), single-pass tf32, bf16, fp16, fp8, or a split: bf16x3 (bf16 hi*hi + hi*lo + "
        "lo*hi), 3xtf32, bf16x6, bf16x2 and fp16x2 (one operand split), fp64"
    )
    peak_flops: float = Field(description="dense FLOP/s of this path on the device: its format's peak over terms")
    feasible: bool = Field(description="can meet the problem's tolerance (measured: max error within the margin)")
    why: str = ""
    terms: int = Field(1, description="tensor-core products per step (3 for bf16x3 and 3xtf32)")
    max_error: float | None = Field(
        None,
        description="measured on the problem's inputs: max |a - b| / (atol + rtol |b|) against the reference "
        "(None: not measured, or not finite)",
    )


class InputSetReport(BaseModel):
    """One of the shapes a problem declares with get_input_sets(), as verify checked (and timed) it."""

    index: int = Field(description="1-based, as in a mismatch's 'input set N'")
    shapes: list[str] = Field(default_factory=list, description="each input: a tensor's shape and dtype, or its type")
    correct: bool | None = Field(None, description="the candidate matched the reference on it (None: not reached)")
    timing: Timing | None = Field(None, description="with timing_sets 'all': the candidate and baselines on this set")
    speedup: float | None = Field(None, description="the faster baseline's median over the candidate's, on this set")
    speedup_over: str | None = None


class VerifyReport(JobAware):
    verdict: Verdict | None = None
    correct: bool | None = None
    target: str | None = None
    device: str | None = None
    execution: str | None = Field(None, description="how kernels ran: 'cuda', 'xpu' or 'triton-interpreter'")
    findings: list[Finding] = Field(default_factory=list)
    speedup: float | None = Field(
        None, description="baseline median / candidate median, over the faster baseline timed"
    )
    speedup_over: str | None = Field(None, description="which baseline speedup is measured against")
    speedup_ci: list[float] | None = Field(None, description="95% bootstrap confidence interval of the speedup")
    sol_ms: float | None = Field(None, description="speed-of-light time of the problem on this device (GPU only)")
    fraction_of_sol: float | None = Field(
        None,
        description="sol_ms over the candidate's median time, never over 1: a time below the model's bound "
        "corrects the bound (a below_speed_of_light_model finding says which assumption failed)",
    )
    sol_path: str | None = Field(
        None,
        description="the compute path the bound assumes and why (the fastest that meets the tolerance with a "
        "margin on the problem's own inputs: e.g. bf16x3 for an fp32 GEMM at 1e-4), and any correction",
    )
    compute_paths: list[ComputePath] = Field(
        default_factory=list,
        description="every compute path of the problem with its measured max error (fraction of the tolerance) "
        "and its rate on the device",
    )
    device_state: dict[str, Any] = Field(default_factory=dict, description="clocks and device facts when known")
    timing: Timing | None = None
    mismatches: list[Mismatch] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    trials: int | None = None
    seed: int | None = Field(
        None, description="the seed of every input and weight of this call: pass it back to reproduce"
    )
    precision: str | None = Field(
        None,
        description="the precision that judged it (fp32, tf32, bf16, fp16): asked for, the problem's, or its dtype's",
    )
    atol: float | None = Field(None, description="the absolute tolerance that judged it")
    rtol: float | None = Field(None, description="the relative tolerance that judged it")
    reference_math: str | None = Field(
        None,
        description="the math the judging reference ran at: TF32 and reduced-precision reductions off at every "
        "precision (e.g. 'matmul ieee, conv ieee, rnn ieee'); precision tf32 loosens the tolerance only",
    )
    baseline_math: str | None = Field(
        None, description="the math eager and torch.compile were timed at: torch's defaults, as users run them"
    )
    seconds: float | None = None
    phases: dict[str, float] = Field(
        default_factory=dict,
        description="seconds per step, each counted once (in the worker: plan, load, models, correctness, "
        "baseline_compile: the wait for torch.compile, timing, checks; baseline_compile_ahead: the compile that ran "
        "meanwhile; paths_wait: the server's wait for the compute paths): where a verify's time went",
    )
    node: str | None = Field(None, description="the cluster node it ran on (Ray executor; see list_targets nodes)")
    shapes: list[str] = Field(
        default_factory=list, description="the input shapes the trials ran, e.g. '1024x8192 float32'"
    )
    published_shapes: list[str] | None = Field(
        None,
        description="where Triton's CPU interpreter ran a reduced instance of the problem (smaller batch and spatial "
        "sizes): the problem's own input shapes, which a GPU verify runs",
    )
    input_sets: list[InputSetReport] = Field(
        default_factory=list, description="the problem's get_input_sets() shapes that were checked, in order"
    )
    speedup_geomean: float | None = Field(
        None,
        description="with timing_sets 'all': the geometric mean of the speedups on get_inputs() and on every input set",
    )


class BatchSummary(BaseModel):
    total: int = 0
    verdicts: dict[str, int] = Field(default_factory=dict, description="how many items got each verdict")
    best_index: int | None = Field(None, description="the passing item with the highest speedup")
    best_speedup: float | None = None
    seconds: float = 0.0
    candidates_per_minute: float | None = None


class VerifyBatchReport(JobAware):
    reports: list[VerifyReport] = Field(default_factory=list, description="one VerifyReport per item, in item order")
    summary: BatchSummary = Field(default_factory=BatchSummary)


def summarize_batch(reports: list[VerifyReport], seconds: float) -> BatchSummary:
    verdicts: dict[str, int] = {}
    for r in reports:
        verdicts[r.verdict or "unknown"] = verdicts.get(r.verdict or "unknown", 0) + 1
    passing = [(r.speedup, i) for i, r in enumerate(reports) if r.verdict == "pass" and r.speedup is not None]
    best = max(passing) if passing else None
    return BatchSummary(
        total=len(reports),
        verdicts=verdicts,
        best_index=best[1] if best else None,
        best_speedup=best[0] if best else None,
        seconds=round(seconds, 3),
        candidates_per_minute=round(60 * len(reports) / seconds, 2) if seconds > 0 else None,
    )


class JobInfo(BaseModel):
    job_id: str
    tool: str
    status: JobState
    seconds: float
    progress: str | None = None
    error: str | None = None
    result: dict[str, Any] | None = Field(None, description="the tool's own result, when done")


class Lever(BaseModel):
    """A change the reference's structure allows and a profile cannot see, priced in the roofline's terms."""

    kind: Literal[
        "fold_reduction", "reduce_first", "weight_once", "constant_output", "dead_work", "cancelled_parameters"
    ]
    title: str
    detail: str = Field("", description="what the graph shows and why the change is exact")
    action: str = Field("", description="the change to make in the kernel")
    nodes: list[str] = Field(default_factory=list, description="the reference's FX nodes it concerns")
    flops_saved: float = Field(0.0, description="FLOPs per forward the change removes (torch FlopCounterMode)")
    bytes_saved: float = Field(0.0, description="minimum bytes per forward it removes (the roofline's byte model)")
    flops_after: float = 0.0
    bytes_after: float = 0.0
    sol_ms_after: float = Field(0.0, description="T_SOL of the forward after the change, on the roofline's peaks")
    evidence: dict[str, float | str] = Field(default_factory=dict)


class Convolution(BaseModel):
    """One convolution of the reference, and the implicit GEMM the bound prices it as on the bound's path."""

    op: str = Field(description="e.g. conv2d, conv_transpose3d")
    transposed: bool = False
    batch: int
    c_in: int
    c_out: int
    groups: int = 1
    kernel: list[int]
    stride: list[int]
    padding: list[int]
    dilation: list[int]
    in_spatial: list[int]
    out_spatial: list[int]
    flops: float = Field(
        description="as torch's FlopCounterMode counts it: every output pixel times every tap (a transposed "
        "convolution: every input pixel times every tap)"
    )
    form: str = Field(
        "",
        description="the implicit GEMM the bound takes, the one that pads least on its path: 'gather' (a row per "
        "output pixel, K = C_in/groups x taps) or 'scatter' (a row per input pixel, N = C_out/groups x taps)",
    )
    m: int = Field(0, description="rows of that GEMM (batch x pixels)")
    n: int = Field(0, description="its N (the largest phase's, when the stride splits it in phases)")
    k: int = Field(0, description="its K (the largest phase's, when the stride splits it in phases)")
    phases: int = Field(1, description="stride phases the form splits into, each with its own taps")
    padded_flops: float = Field(0.0, description="FLOPs on the bound's path with N and K padded to its MMA shapes")


class Roofline(BaseModel):
    flops: float = Field(description="FLOPs of one reference forward (torch FlopCounterMode)")
    bytes: float = Field(description="minimum bytes: inputs and parameters read once, outputs written once")
    dtype: str = Field("fp32", description="the problem's dominant floating-point dtype")
    path: str = Field("fp32", description="the compute path the bound assumes: the fastest that can meet the tolerance")
    path_reason: str = Field("", description="why that path")
    paths: list[ComputePath] = Field(default_factory=list, description="every path considered")
    paths_measured: bool = Field(False, description="the paths' errors were measured on the problem's inputs")
    atol: float | None = Field(None, description="the tolerance the path was chosen for")
    rtol: float | None = None
    device: str = Field(description="the device whose peaks were used")
    peaks_source: str = Field("", description="where the device's peak figures come from")
    peak_flops: float = Field(description="FLOP/s of the chosen path")
    peak_bandwidth: float = Field(description="bytes/s")
    sol_ms: float = Field(description="T_SOL = max(flops / peak_flops, bytes / peak_bandwidth), ms: a lower bound")
    flop_ms: float = 0.0
    byte_ms: float = 0.0
    measured_ms: float | None = Field(None, description="device time of one forward in this profile")
    fraction_of_sol: float | None = Field(
        None,
        description="sol_ms / measured_ms (1.0 = at the speed of light), never over 1: against corrected_sol_ms "
        "when the measured time beat the bound; None only without a measured time",
    )
    below_bound: bool = Field(
        False,
        description="the measured time beat the bound: the model (path, peaks or bytes) was wrong for this "
        "kernel and was corrected (correction says how)",
    )
    corrected_sol_ms: float | None = Field(None, description="the bound after the correction, when below_bound")
    correction: str | None = Field(None, description="which assumption the kernel broke and what the bound became")
    out_bytes: float | None = Field(None, description="bytes of the outputs alone (the write no kernel avoids)")
    bound: Literal["memory", "compute"] = "memory"
    bound_reason: str = Field("", description="what sets the bound: the compute term's FLOPs or which bytes")
    kind: str | None = Field(
        None, description="the ops that carry most FLOPs: matmul, attention, or e.g. 'convolution (transposed 3d)'"
    )
    flops_by_op: dict[str, float] = Field(default_factory=dict, description="FLOPs by op: matmul, convolution, ...")
    special_functions: float = Field(
        0.0, description="special-function evaluations of one forward (exp, log, reciprocal: a tanh counts 2)"
    )
    logs_by_op: dict[str, float] = Field(
        default_factory=dict,
        description="elements of one forward through each op whose exact form takes a log of each (mish, softplus, "
        "log, ...)",
    )
    convs: list[Convolution] = Field(default_factory=list, description="the convolutions, as implicit GEMMs")
    compute_flops: float | None = Field(
        None, description="FLOPs the compute term pays on the path: flops with the convolutions' MMA padding"
    )
    levers: list[Lever] = Field(
        default_factory=list, description="levers of the reference's structure (its FX graph) a profile cannot see"
    )
    modeled: bool = Field(
        False,
        description="the bound of a named device (device_model) from its table peaks, not of the device "
        "profiled: a model, with no measured time set against it unless that is the device profiled",
    )
    notes: list[str] = Field(default_factory=list)
