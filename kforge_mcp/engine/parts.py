"""What every verb of the Engine shares: settings, home and allowed folders, the executor, the caches and the
targets; a source resolved, a target's status, the device and lane a call runs on."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from kforge_mcp import platforms, targets
from kforge_mcp.agents import prompts
from kforge_mcp.core.errors import InputError, KforgeError
from kforge_mcp.core.home import check_home
from kforge_mcp.core.options import DEFAULT_TARGET, DEFAULT_TIMEOUT_S
from kforge_mcp.core.problem import Source, default_allowed_roots, resolve_source
from kforge_mcp.core.requests import Done, ProbeRequest
from kforge_mcp.core.schemas import TargetsReport, TargetStatus
from kforge_mcp.core.settings import Settings
from kforge_mcp.engine.paths import ComputePaths
from kforge_mcp.runtime.cache import CompileCache
from kforge_mcp.runtime.executor import Executor, LocalExecutor
from kforge_mcp.runtime.pool import WorkerPool
from kforge_mcp.runtime.probe_cache import KnownTargets
from kforge_mcp.targets import get_target

Progress = Callable[[str], None] | None


def read_settings() -> Settings:
    """The library's entry: KFORGE_* read from the process environment (an engine, or a package function
    that needs no engine), then passed down."""
    return Settings.read()


def engine_settings(engine) -> Settings:
    """An engine's settings; without one (a caller that starts its own later), the library's, read as an engine
    reads them."""
    return engine.settings if engine is not None else read_settings()


class EngineParts:
    def __init__(
        self,
        home: Path | str | None = None,
        memory_limit_mb: int | None = None,
        allow_dirs: Sequence[Path | str] | None = None,
        executor: Executor | None = None,
        settings: Settings | None = None,
    ):
        # the library's entry: KFORGE_* read once here (or given) and passed down
        self.settings = settings = settings or read_settings()
        platforms.use(settings)
        targets.use(settings)
        prompts.use(settings)
        self.home = Path(home).expanduser() if home else settings.home
        # a problem or candidate given as a path must resolve under one of these
        self.allow_dirs = (
            [Path(d).expanduser().resolve() for d in allow_dirs] if allow_dirs is not None else default_allowed_roots()
        )
        check_home(self.home)  # read-only or full: a clear error naming the path, before any worker starts
        limit = memory_limit_mb or settings.worker_memory_mb
        # where worker jobs run: this machine's pool unless an executor (e.g. Ray) is given
        self.executor: Executor = executor or LocalExecutor(
            WorkerPool(self.home, memory_limit_mb=limit, settings=settings)
        )
        self.compile_cache = CompileCache(self.home / "cache" / "compile")
        self.paths = ComputePaths(self.home, self.executor)
        self.prebuilt: set[tuple[str, str, str]] = set()  # the CUDA head starts started (judge/pipeline.py)
        self.baselines_kept: set[str] = set()  # the baselines jobs done (judge/pipeline.py)
        # a cluster's probe lists its live nodes: never answered from this machine's kept probe
        self.targets = KnownTargets(self.home, self._probe, kept=self.executor.name == "local")

    def resolve_source(self, value: str, role: str) -> Source:
        """Source text, or a .py path under the allowed directories (``allow_dirs``)."""
        return resolve_source(value, role, self.allow_dirs)

    def list_targets(self, refresh: bool = False, on_progress: Progress = None) -> TargetsReport:
        return self.targets.get(refresh, on_progress)

    def _probe(self, on_progress: Progress = None) -> TargetsReport:
        reply = self.executor.run("compile", ProbeRequest(), timeout_s=DEFAULT_TIMEOUT_S, on_progress=on_progress)
        if not isinstance(reply, Done):
            raise KforgeError(f"probing targets failed: {reply.message}")
        return TargetsReport.model_validate(reply.value)

    def target_status(self, name: str) -> TargetStatus:
        get_target(name)  # unknown names fail here, with the list of known ones
        return next(t for t in self.list_targets().targets if t.name == name)

    def device_for(self, target: str, device: str | None) -> str:
        """The device a call of ``target`` runs on: the one named (``cuda`` meaning cuda:0), else the best here."""
        status = self.target_status(target)
        if not status.available:
            raise InputError(f"target '{status.name}' is not available here: {status.reason}")
        if device is None:
            return status.devices[0]
        device = "cuda:0" if device == "cuda" else "xpu:0" if device == "xpu" else device
        missing = status.unavailable_devices.get(device.split(":")[0])
        if device not in status.devices and missing:  # a device kind the target supports, absent here
            raise InputError(f"device '{device}' is not available to target '{status.name}' here: {missing}")
        if device not in status.devices:
            raise InputError(
                f"device '{device}' is not available to target '{status.name}' here; "
                f"available: {', '.join(status.devices) or 'none'}"
            )
        return device

    def lane_for(self, target: str = DEFAULT_TARGET, device: str | None = None) -> str:
        """The lane a verify of this target on this device runs on ('invalid' when there is none:
        verify itself then says why)."""
        try:
            return self.device_for(target, device)
        except KforgeError:
            return "invalid"

    def parallelism(self, target: str = DEFAULT_TARGET, device: str | None = None) -> int:
        """How many verifies of this target on this device the executor runs at once."""
        return max(1, int(self.executor.slots(self.lane_for(target, device))))

    @property
    def pool(self) -> WorkerPool | None:
        """The local worker pool (None when jobs run elsewhere)."""
        return getattr(self.executor, "pool", None)

    def close(self) -> None:
        self.paths.close()
        self.executor.shutdown()
