"""The Platform contract: the vendor behind a torch device. A Target is a kernel language; a Platform is the
hardware its kernels run on and the vendor's tools around it: how its devices are told apart, its profilers
(how each captures a run, the files each writes and how they are read), its peaks (a table of data beside its
module), the MMA shapes its tensor units pad a convolution's GEMM to, the compile checks its limits imply, the
device-wide state a candidate can leave changed on it, and the words its profiles speak (``vocabulary``).

A subclass in ``kforge_mcp/platforms/<vendor>/platform.py`` is found by the registry (platforms/__init__.py);
every member has a default, so a vendor says only what it knows. Torch is imported only where a member runs.
"""

from __future__ import annotations

import functools
import re
import sys
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, PositiveFloat, PositiveInt, ValidationError

from kforge_mcp.core.profile import ProfileReport
from kforge_mcp.core.schemas import CompileReport, Diagnostic
from kforge_mcp.platforms.formats import ProfileFormat


@dataclass(frozen=True)
class Peaks:
    """One device's dense peaks: memory bandwidth (bytes/s) and FLOP/s per compute format, with where they come
    from, and its platform's MMA granules (the smallest K per format and N of its tensor units' instructions)."""

    name: str
    bandwidth: float
    flops: Mapping[str, float] = field(default_factory=dict)
    source: str = ""
    note: str = ""
    mma_k: Mapping[str, int] = field(default_factory=dict)
    mma_n: int = 1


@dataclass(frozen=True)
class PeakTable:
    """A vendor's peaks (``peaks.toml`` beside its platform module): its devices, the names they go by (every
    part of an alias must appear in the lowercased name; the first alias that matches wins), and the device whose
    figures stand in for a name no table knows (at most one platform names one)."""

    devices: Mapping[str, Peaks] = field(default_factory=dict)
    aliases: tuple[tuple[tuple[str, ...], str], ...] = ()
    default: str | None = None


class _Device(BaseModel, extra="forbid"):
    name: str
    bandwidth: PositiveFloat  # bytes/s
    flops: dict[str, PositiveFloat] = {}  # FLOP/s per compute format
    source: str = ""
    note: str = ""


class _Alias(BaseModel, extra="forbid"):
    match: list[str]
    device: str


class _Mma(BaseModel, extra="forbid"):
    k: dict[str, PositiveInt] = {}
    n: PositiveInt = 1


class _PeaksFile(BaseModel, extra="forbid"):
    default: str | None = None
    aliases: list[_Alias] = []
    mma: _Mma = _Mma()
    device: list[_Device] = []


def load_peak_table(path: Path) -> PeakTable:
    """A ``peaks.toml``: ``[[device]]`` entries (name, bandwidth, flops, source, note), ``aliases`` ({match,
    device}), ``default``, and ``[mma]`` (k per format, n) that every device of the file shares."""
    try:
        data = _PeaksFile.model_validate(tomllib.loads(path.read_text()))
    except (OSError, tomllib.TOMLDecodeError, ValidationError) as e:
        raise ValueError(f"{path}: not a readable peaks table: {e}") from None
    devices = {
        d.name: Peaks(d.name, d.bandwidth, d.flops, d.source, d.note, data.mma.k, data.mma.n) for d in data.device
    }
    named = {a.device for a in data.aliases} | ({data.default} if data.default else set())
    if named - set(devices):
        raise ValueError(
            f"{path}: aliases or default name devices the table lacks: {', '.join(sorted(named - set(devices)))}"
        )
    return PeakTable(devices, tuple((tuple(a.match), a.device) for a in data.aliases), data.default)


@dataclass(frozen=True)
class SmLimits:
    """What one SM (the vendor's multiprocessor) holds at once."""

    registers: int  # 32-bit registers per SM
    shared_bytes: int  # shared memory per SM
    warps: int  # resident warps per SM
    blocks: int  # resident blocks per SM


@dataclass(frozen=True)
class MmaCounter:
    """A per-kernel metric (a key of ``KernelProfile.metrics``) whose value above 0 says MMAs ran, and the unit
    they ran on."""

    metric: str = ""
    unit: str = ""


@dataclass(frozen=True)
class CompiledMma:
    """How a target marks the MMA instructions of a kernel's compiled code in its metrics: the metric, what the
    code is called ('PTX'), the unit each of the metric's values names and each unit's instruction in that code."""

    metric: str = ""
    code: str = ""
    units: Mapping[float, str] = field(default_factory=dict)
    instructions: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class EngineCounters:
    """Per-kernel counters of the vendor's vector engines (keys of ``KernelProfile.metrics``): % of the time
    stalled, idle and active, the prefix of each stall reason's share, memory throughput (GB/s), work groups."""

    stall: str = ""
    idle: str = ""
    active: str = ""
    stall_reason_prefix: str = ""
    memory_gbps: str = ""
    work_groups: str = ""


def _names(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.I)


@dataclass(frozen=True)
class KernelNames:
    """What a kernel's name says it does, searched case-insensitively. The defaults are the names PyTorch and
    Triton give kernels on every vendor's device and the words of plain names; ``extended`` adds a vendor's
    libraries' names."""

    gemm: re.Pattern[str] = _names(r"gemm|matmul|_mm_|^mm_|_mm$|dot_kernel|linear")
    conv: re.Pattern[str] = _names(r"conv|implicit_gemm|winograd")
    reduction: re.Pattern[str] = _names(r"reduce|softmax|norm|sum_|_sum|mean|argmax|max_kernel|scan|cumsum")
    elementwise: re.Pattern[str] = _names(
        r"elementwise|vectorized|unrolled|pointwise|triton_poi|add_|relu|gelu|bias|scale"
    )
    copy: re.Pattern[str] = _names(r"memcpy|memset|copy|transpose|permute|gather|scatter|index")
    memcpy: re.Pattern[str] = _names(r"memcpy|memset")

    def extended(self, **library: str) -> KernelNames:
        """These names and more per kind (``gemm=r"cublas|nvjet"``: alternatives of a regex)."""
        return replace(
            self, **{kind: _names(f"{getattr(self, kind).pattern}|{more}") for kind, more in library.items()}
        )


@dataclass(frozen=True)
class Vocabulary:
    """The words a vendor's profiles speak, which the analysis rules (advice/) read from the platform a profile
    came from: its units (names of ``KernelProfile.pipes``) and what each runs, the stalls warps report by what
    they wait on (``StallReason.reason``), its multiprocessors (the SM count to assume, warp size, limits per
    arch, the arch each device of its peaks table compiles for), global memory's sectors, what its library
    kernels' names say, and the metric keys its parsers store. Every term defaults to empty (0, '', (), {}): a
    platform names only those its profiles have, and a rule that needs one the report's platform lacks says so
    in ``rules_not_run``. A vendor whose names say more (the operand type, the unit) overrides the methods."""

    tensor_pipes: tuple[str, ...] = ()
    pipe_units: Mapping[str, str] = field(default_factory=dict)  # the MMA unit each tensor pipe runs
    mma_pipe: str = ""  # the tensor pipe only MMA instructions keep busy: any activity there says MMAs ran
    alu_pipe: str = ""  # the pipe of integer and index math
    copy_pipe: str = ""  # the pipe of the bulk copy engine: busy when operands arrive by it, not by loads
    convert_metric: str = ""  # the metric key of the pipe that converts types (and runs transcendentals), % busy
    special_function_lanes: float = 0.0  # that pipe's results per cycle over the FMA pipe's lanes
    serialized_mma_metric: str = ""  # the metric that is 1 where the assembler serialized a kernel's MMAs
    polynomial_log_metric: str = ""  # the metric counting a kernel's inlined software logs (not the hardware's)
    superseded_mma_units: tuple[str, ...] = ()  # units a faster one replaces on the vendor's newer parts
    issued_mma: MmaCounter = MmaCounter()  # MMA instructions executed (% of peak), and their unit
    tensor_cycles: MmaCounter = MmaCounter()  # the tensor cores' own busy cycles (%), and the unit when
    # issued_mma says none ran
    compiled_mma: CompiledMma = CompiledMma()
    global_latency_stalls: tuple[str, ...] = ()  # warps waiting on global memory
    shared_stalls: tuple[str, ...] = ()  # warps waiting on shared memory
    barrier_stalls: tuple[str, ...] = ()  # warps waiting on each other at a barrier
    default_sm_count: int = 0  # the SMs to assume where a profile does not say
    default_sm_count_of: str = ""  # the device that count is of
    warp_size: int = 0  # threads a warp
    sm_limits: Mapping[str, SmLimits] = field(default_factory=dict)  # by arch
    arch_by_device: Mapping[str, str] = field(default_factory=dict)  # a device of its peaks table -> its arch
    sector_bytes: int = 0  # global memory moves in sectors of this size
    coalesced_sectors_per_request: int = 0  # a warp's coalesced 4-byte access
    vector_sectors_per_request: int = 0  # what vector accesses legitimately touch
    kernel_names: KernelNames = KernelNames()
    engine_counters: EngineCounters = EngineCounters()

    @property
    def shared_pipe_stalls(self) -> tuple[str, ...]:
        """Warps waiting on shared memory, or on each other at a barrier around it."""
        return (*self.shared_stalls, *self.barrier_stalls)

    def limits(self, arch: str | None) -> SmLimits | None:
        """The SM limits of an arch; None for one not listed."""
        return self.sm_limits.get(arch or "")

    def name_operand(self, name: str) -> str | None:
        """The operand type ('bf16', 'tf32') a library kernel's name states; None when it states none."""
        return None

    def name_unit(self, name: str) -> str | None:
        """The MMA unit a library kernel whose name states an operand type runs on; None when names say none."""
        return None


@dataclass
class ProfiledRun:
    """What a profiler's ``capture`` is given (profiling/capture.py makes it): the job's folder, the profiled
    program's command line, a way to run a process, and where to say what happened."""

    workdir: Path
    iterations: int  # forwards profiled
    warmup: int  # forwards the profiled program runs first
    metrics: list[str] | None  # the metrics asked for; None: the profiler's own selection
    timeout_s: float
    runner: Callable[[str, dict], list[str]]  # (profiler name, extra spec) -> the profiled program's argv
    run: Callable[[list[str], float], Any]  # (argv, timeout) -> subprocess.CompletedProcess (TimeoutExpired past it)
    keep_raw: Callable[[str, str], None]  # (file name, text): the profiler's own output, kept as a resource
    notes: list[str] = field(default_factory=list)


class Profiler:
    """A vendor's profiler: the files it writes (``formats``, read by analyze_profile) and, where a platform names
    it for depth 'metrics', how it captures a profile: it wraps the profiled program (profiling/runner.py), which
    runs the forwards through ``in_runner``, and ``merge`` puts what it saw on the torch.profiler timeline. The
    defaults describe a profiler whose files are read but which kforge does not run."""

    name: ClassVar[str]  # 'ncu': the profiled program's mode and the suffix of the report's source
    title: ClassVar[str]  # 'Nsight Compute (ncu)': how notes name it
    formats: ClassVar[tuple[ProfileFormat, ...]] = ()

    def missing(self) -> str | None:
        """Why it cannot capture here (its tool is not on PATH); None when it can."""
        return None

    def capture(self, run: ProfiledRun) -> ProfileReport | None:
        """Run the forwards under the profiler and parse what it wrote; None (with ``run.notes`` saying why)
        when it gave nothing."""
        run.notes.append(f"{self.title} is not run by kforge here: analyze_profile reads its files")
        return None

    def command(self, metrics: list[str] | None) -> list[str] | None:
        """The profiler's own command line, the profiled program's to follow (``metrics`` None: the profiler's own
        selection); None where kforge launches no program of its own for it."""
        return None

    def merge(self, report: ProfileReport, captured: ProfileReport) -> None:
        """Put what the capture saw on the timeline's report (and say so in its source and notes)."""

    def in_runner(self, forward: Callable[[], object], synchronize: Callable[[], None], spec: dict) -> None:
        """Inside the profiled program, after its warm-up: run the forwards as this profiler wants them marked."""
        for _ in range(int(spec.get("iterations", 1))):
            forward()
        synchronize()


class Platform:
    """What every platform may say; the defaults describe a device the engine knows nothing more of (no vendor
    profiler, no device-wide state to guard, no peaks of its own). A subclass in platforms/<vendor>/platform.py
    is found by the registry (platforms/__init__.py)."""

    name: ClassVar[str] = "unknown"  # the vendor folder's name
    title: ClassVar[str] = "an unknown vendor"  # how notes name the vendor: 'NVIDIA'
    kinds: ClassVar[tuple[str, ...]] = ()  # torch device kinds it may serve: 'cuda', 'xpu', 'mps', 'cpu'
    order: ClassVar[int] = 100  # the first platform (by order) that identifies a device serves it
    profilers: ClassVar[tuple[Profiler, ...]] = ()  # the vendor's profilers: their files load in analyze_profile
    metrics: ClassVar[str | None] = None  # the profiler (a name in ``profilers``) depth 'metrics' captures with
    proton: ClassVar[bool] = False  # Triton's proton profiler sees this vendor's kernels
    vocabulary: ClassVar[Vocabulary] = Vocabulary()
    guarded_state: ClassVar[str] = "nothing: no device-wide state a candidate could leave changed is known here"

    def identifies(self, kind: str, build: Mapping[str, Any]) -> bool:
        """Whether a torch device of ``kind`` is this vendor's; ``build``: torch's build (torch/version.py's
        constants: ``cuda``, ``hip``, ``xpu``), which tells a ROCm build's 'cuda' devices from NVIDIA's."""
        return kind in self.kinds

    @functools.cached_property
    def peaks(self) -> PeakTable:
        """The vendor's peaks table: ``peaks.toml`` beside the module that defines the platform (none: empty)."""
        path = Path(sys.modules[type(self).__module__].__file__ or ".").parent / "peaks.toml"
        return load_peak_table(path) if path.is_file() else PeakTable()

    def metrics_profiler(self) -> Profiler | None:
        return next((p for p in self.profilers if p.name == self.metrics), None)

    def arch(self, major: int, minor: int) -> str | None:
        """The arch a compile for a device of torch's compute capability (major, minor) targets ('sm_90a');
        None where the vendor's archs are not named by it."""
        return None

    def device_name(self, index: int) -> str | None:
        """The device's product name where the vendor knows it better than torch does; None: torch's."""
        return None

    def device_timeline(self, report: ProfileReport, forward: Callable[[], object], iterations: int) -> None:
        """Where torch.profiler does not see this vendor's kernels: time ``iterations`` forwards another way and
        put the result on ``report`` (Apple: MPS events). Default: nothing (torch.profiler's trace has them)."""

    def compiles_for(self, arch: str | None) -> bool:
        """Whether a compile for ``arch`` builds for this vendor's devices (its compile checks apply)."""
        return False

    def compile_diagnostics(self, report: CompileReport) -> list[Diagnostic]:
        """What the vendor's limits say of a compile for its devices (e.g. shared memory past what a block may
        have): errors first to fix, warnings. Runs without a device."""
        return []

    def snapshot(self, index: int) -> dict[str, Any]:
        """The device-wide state of device ``index`` a candidate could change (name -> plain value)."""
        return {}

    def put_back(self, index: int, before: dict[str, Any], changed: set[str]) -> None:
        """Put back the ``changed`` names of ``before``; raises nothing (the snapshot after says what stayed)."""
