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
import sys
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
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
class Vocabulary:
    """What the analysis rules read from this vendor's profiles: the pipes that are its tensor units (names of
    ``KernelProfile.pipes``) and the SM count to assume when a profile does not say."""

    tensor_pipes: tuple[str, ...] = ()
    default_sm_count: int | None = None


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
