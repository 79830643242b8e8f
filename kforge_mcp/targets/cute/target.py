"""CuTe: the CuTe DSL (``nvidia-cutlass-dsl``: ``@cute.kernel``, ``@cute.jit``, ``cute.compile``)
and CuTe C++ (CUTLASS headers from ``nvidia-cutlass``, built through load_inline like the
cuda target, which adds the include directory).

A CuTe DSL candidate compiles its launcher with ``cute.compile(launcher, *args)`` and calls
the compiled function from ``ModelNew.forward``. ``compile`` works without a GPU: it runs
one forward on the problem's CPU inputs with ``cute.compile`` swapped for a recorder that
compiles for the chosen arch (``--gpu-arch``), keeps PTX and cubin, and returns a function
that does nothing; registers, spills and shared memory come from cuobjdump on the cubin.
DSL errors carry the Python traceback of the candidate's kernel, so they map to its lines.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import tempfile
import time
import traceback
import types
from pathlib import Path

from kforge_mcp.core.errors import InputError
from kforge_mcp.core.problem import Source
from kforge_mcp.core.process_env import set_default
from kforge_mcp.core.schemas import CompileReport, Diagnostic, Finding, KernelResources, TargetStatus
from kforge_mcp.core.source import SourceRuntimeError, import_source
from kforge_mcp.devices.driver_probe import torch_build
from kforge_mcp.platforms.nvidia.compile_checks import DEFAULT_ARCH, normalize_arch
from kforge_mcp.targets.base import Loaded, Target, dist_version
from kforge_mcp.targets.nvidia import NEEDS_GPU, cubin_resources

PIP = "pip install 'kforge-mcp[cute]' (or pip install nvidia-cutlass-dsl nvidia-cutlass)"


def is_cpp(source: Source) -> bool:
    """CuTe C++ through load_inline, rather than the Python DSL."""
    return "load_inline" in source.text and not re.search(r"\bimport\s+cutlass|\bfrom\s+cutlass\b", source.text)


def cpp_target() -> Target:
    """CuTe C++ is CUDA C++ with more headers: the registry's cuda target builds it (asked by name,
    so no target imports another)."""
    from kforge_mcp.targets import get_target

    return get_target("cuda")


def dump_dir(worker_tmp: str | None) -> Path:
    """The DSL writes PTX and cubin only into an existing dump directory; it reads the
    variable once, so one per worker process, created before each compile."""
    root = worker_tmp or tempfile.gettempdir()  # the pool cleans its workers' tmp
    path = Path(set_default("CUTE_DSL_DUMP_DIR", str(Path(root) / f"kforge-cute-{os.getpid()}")))
    path.mkdir(parents=True, exist_ok=True)
    return path


def merge_options(options: str | None, arch: str) -> str:
    """The caller's options with the arch replaced and PTX / cubin / line info kept."""
    text = re.sub(r"--gpu-arch[= ]\S+", "", options or "")
    for flag in ("--keep-ptx", "--keep-cubin", "--generate-line-info"):
        if flag not in text:
            text += f" {flag}"
    return f"--gpu-arch {arch} {text.strip()}".strip()


def exception_diagnostics(exc: BaseException, path: Path, source: Source) -> list[Diagnostic]:
    """The deepest frame in the candidate over the exception and its causes: the DSL wraps
    errors raised while tracing a kernel, and the candidate's own frame is the useful one."""
    chain: list[BaseException] = []
    e: BaseException | None = exc
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__ or e.__context__
    line = None
    for err in chain:
        for frame in traceback.extract_tb(err.__traceback__):
            if frame.filename == str(path):
                line = frame.lineno
        if line is None:  # DSL errors may carry the location as text: File "...", line N
            m = re.search(rf'{re.escape(str(path))}"?, line (\d+)', str(err))
            line = int(m.group(1)) if m else None
    root = chain[-1] if len(chain) > 1 and type(chain[0]).__name__.startswith("DSL") else chain[0]
    message = f"{type(root).__name__}: {_plain(str(root))[:2000]}"
    if root is not chain[0]:
        message += f" (reported by the CuTe DSL as {type(chain[0]).__name__})"
    return [Diagnostic(line=line, message=message, file=source.name)]


def _plain(text: str) -> str:
    """DSL messages carry terminal colours."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text).strip()


class CompiledStub:
    """Returned by the recording ``cute.compile``: calling it does nothing (no GPU here)."""

    def __init__(self, compiled):
        self.compiled = compiled

    def __call__(self, *args, **kwargs):
        return None


@contextlib.contextmanager
def recording_compile(arch: str, records: list, worker_tmp: str | None):
    import cutlass.cute as cute

    real = cute.compile

    class Recorder:
        def __call__(self, fn, *args, options=None, **kwargs):
            dump_dir(worker_tmp)
            compiled = real(fn, *args, options=merge_options(options, arch), **kwargs)
            records.append(
                (getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", "jit"), compiled)
            )
            return CompiledStub(compiled)

        def __getitem__(self, item):  # cute.compile[...] variants: same recording
            return self

    # records each compile, called as cute.compile is; unused-ignore: without the cute extra there is no type
    cute.compile = Recorder()  # type: ignore[assignment, unused-ignore]
    try:
        yield
    finally:
        cute.compile = real


def kernel_names(module: types.ModuleType) -> list[str]:
    """Names of functions decorated with ``@cute.kernel`` in the candidate's source."""
    text = module.__kforge_source__.text
    return re.findall(r"@cute\.kernel[^\n]*\n(?:\s*@[^\n]*\n)*\s*def\s+(\w+)", text)


def pretty_kernel(symbol: str, names: list[str]) -> str:
    for name in sorted(names, key=len, reverse=True):
        if f"_{name}_" in symbol or symbol.endswith(f"_{name}"):
            return name
    return symbol


class CuteTarget(Target):
    name = "cute"
    summary = (
        "CuTe DSL (nvidia-cutlass-dsl: @cute.kernel / @cute.jit / cute.compile) and CuTe C++ headers via load_inline"
    )
    title = "CuTe"
    order = 1

    def cache_versions(self) -> dict[str, str]:
        return {d: dist_version(d) or "-" for d in ("nvidia-cutlass-dsl", "nvidia-cutlass", "triton")}

    def probe(self, devices: list[str]) -> TargetStatus:
        dsl = dist_version("nvidia-cutlass-dsl")
        versions = {
            k: v
            for k, v in {
                "nvidia-cutlass-dsl": dsl,
                "nvidia-cutlass": dist_version("nvidia-cutlass"),
                "torch": (torch_build() or {}).get("__version__"),
            }.items()
            if v
        }
        if dsl is None:
            return TargetStatus(
                name=self.name, available=False, versions=versions, reason=f"nvidia-cutlass-dsl is not installed: {PIP}"
            )
        notes = [
            f"compile: cute.compile with --gpu-arch (default {DEFAULT_ARCH}) without a GPU; pass `problem` so one "
            "forward runs on its CPU inputs with cute.compile recorded",
            "the candidate calls cute.compile(launcher, ...) and then the compiled function from ModelNew.forward",
            "CuTe C++ (load_inline with cute/ or cutlass/ includes) compiles through the cuda target's path",
        ]
        gpus = [d for d in devices if d.startswith("cuda")]
        if not gpus:
            return TargetStatus(
                name=self.name, available=False, reason=NEEDS_GPU, can_compile=True, versions=versions, notes=notes
            )
        return TargetStatus(
            name=self.name, available=True, devices=gpus, can_compile=True, versions=versions, notes=notes
        )

    def check(self, source: Source) -> list[Finding]:
        if is_cpp(source) or "cute" in source.text:
            return []
        return [
            Finding(
                code="no_cute_kernel", message="the candidate uses neither the CuTe DSL (@cute.kernel) nor CuTe C++"
            )
        ]

    def execution(self, device: str) -> str:
        return device.split(":")[0]

    def load(self, source: Source, device: str, workdir: Path) -> Loaded:
        if is_cpp(source):
            return cpp_target().load(source, device, workdir)
        if not device.startswith("cuda"):
            raise InputError(f"target 'cute' needs an NVIDIA GPU to run (device '{device}')")
        dump_dir(self.settings.worker_tmp)
        return Loaded(import_source(source, workdir, "candidate"))

    def compile(self, source: Source, arch: str | None, problem: Source | None, workdir: Path) -> CompileReport:
        if is_cpp(source):
            report = cpp_target().compile(source, arch, problem, workdir)
            report.target = self.name
            return report
        started = time.perf_counter()
        arch = normalize_arch(arch)
        report = CompileReport(ok=False, target=self.name, arch=arch)
        if importlib.util.find_spec("cutlass") is None:
            raise InputError(f"target 'cute': nvidia-cutlass-dsl is not installed here: {PIP}")
        dump_dir(self.settings.worker_tmp)  # before the DSL is first imported: it reads the variable once
        records: list = []
        diags: list[Diagnostic] = []
        module = None
        try:
            with recording_compile(arch, records, self.settings.worker_tmp):
                module = import_source(source, workdir, "candidate")
                if problem is not None:
                    self._trace(module, problem, workdir)
                    report.signature_source = "traced"
        except (InputError, SourceRuntimeError) as e:
            if isinstance(e, InputError) and not e.diagnostics:
                raise
            diags += e.diagnostics
        except Exception as e:  # noqa: BLE001  (the DSL or candidate can raise anything: diagnostics)
            path = Path(module.__file__) if module is not None and module.__file__ else None
            diags += (
                exception_diagnostics(e, path, source)
                if path
                else [Diagnostic(message=f"{type(e).__name__}: {e}", file=source.name)]
            )
        if not records and not diags:
            diags.append(
                Diagnostic(
                    severity="warning" if problem is None else "error",
                    file=source.name,
                    message="no cute.compile call ran"
                    + (
                        " while importing the candidate; pass `problem` so kforge runs ModelNew.forward on its inputs"
                        if problem is None
                        else " in ModelNew.forward: compile the launcher with cute.compile(...) and call "
                        "the compiled function"
                    ),
                )
            )
        names = kernel_names(module) if module is not None else []
        for jit_name, compiled in records:
            ptx, cubin = _artifact(compiled.__ptx__, text=True), _artifact(compiled.__cubin__, text=False)
            usage = cubin_resources(cubin) if cubin else {}
            for symbol, u in usage.items():
                report.kernels.append(
                    KernelResources(
                        name=pretty_kernel(symbol, names),
                        registers=u.get("REG"),
                        spills=u.get("LOCAL"),
                        shared_bytes=u.get("SHARED"),
                        stack_bytes=u.get("STACK"),
                        signature={"symbol": symbol, "launcher": jit_name},
                    )
                )
            if ptx:
                report.ptx = (report.ptx or {}) | {jit_name: ptx}
            sass = _artifact(getattr(compiled, "__sass__", None), text=True)
            if sass:
                report.sass = (report.sass or {}) | {jit_name: sass}
            if cubin is None:
                diags.append(
                    Diagnostic(
                        severity="warning",
                        file=source.name,
                        message=f"{jit_name}: the DSL kept no cubin, so no resource report",
                    )
                )
        for leftover in dump_dir(self.settings.worker_tmp).glob("*"):  # the artifacts are in the report now
            if leftover.is_file():
                leftover.unlink(missing_ok=True)
        report.diagnostics = diags
        report.ok = bool(records) and not any(d.severity == "error" for d in diags)
        report.seconds = time.perf_counter() - started
        return report

    @staticmethod
    def _trace(module, problem: Source, workdir: Path) -> None:
        import torch

        from kforge_mcp.core.problem import build_models, load_problem

        loaded = load_problem(problem, workdir)
        with torch.no_grad():
            _, candidate = build_models(loaded, module, "cpu", build_reference=False)
            candidate(*loaded.make_inputs(seed=0, device="cpu"))


def _artifact(value, text: bool):
    """``__ptx__`` / ``__cubin__`` hold the artifact, or its path when the DSL wrote a file."""
    if value is None:
        return None
    if isinstance(value, str) and len(value) < 4096 and "\n" not in value:  # a path
        if not os.path.exists(value):
            return None
        data = Path(value).read_bytes()
        return data.decode(errors="replace") if text else data
    if text:
        return value.decode(errors="replace") if isinstance(value, bytes) else value
    return value if isinstance(value, bytes) else None
