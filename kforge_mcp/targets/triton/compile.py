"""Triton ``compile``: each launch a candidate makes is built ahead of time to PTX and cubin for
the chosen NVIDIA arch, without a GPU, and its registers, spills and shared memory are read from
the bundled cuobjdump. With a problem, launches are traced and specialised as a real launch is
(triton_launches); without one, signatures are inferred and the report says so (triton_infer).
Autotuned kernels are reported per config with its label; an error that several configs hit is
reported once, naming them.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from kforge_mcp.core.errors import InputError
from kforge_mcp.core.problem import Source
from kforge_mcp.core.schemas import CompileReport, Diagnostic, KernelResources
from kforge_mcp.core.source import SourceRuntimeError, diagnostics_from_exception, import_source
from kforge_mcp.platforms.nvidia.compile_checks import DEFAULT_ARCH
from kforge_mcp.targets.nvidia import PtxasUnavailable, cubin_resources, tool_version, wgmma_serialized
from kforge_mcp.targets.triton.infer import infer_launches
from kforge_mcp.targets.triton.launches import Launch, _def_line, autotune_configs, jit_functions, trace_launches


def parse_arch(arch: str | None) -> int:
    """'sm_90a', 'sm_90', '90', 'sm_100a' -> compute capability as Triton wants it (90, 100)."""
    m = re.fullmatch(r"(?:sm_)?(\d{2,3})a?", (arch or DEFAULT_ARCH).strip().lower())
    if not m:
        raise InputError(f"arch '{arch}' is not an NVIDIA arch such as sm_80, sm_90a or sm_100a")
    return int(m.group(1))


def compile_error_diagnostics(exc: BaseException, kernels: dict[str, Any], source: Source) -> list[Diagnostic]:
    """Triton's CompilationError carries an AST node whose line counts from the kernel's
    ``def``; walk the cause chain (a helper's error is the cause of its caller's) and map
    each to the submitted file. The innermost is the error; callers become notes."""
    from triton.compiler.errors import CompilationError

    by_src = {fn.src: fn for fn in kernels.values()}
    chain = []
    e: BaseException | None = exc
    while isinstance(e, CompilationError):
        chain.append(e)
        e = e.__cause__
    diags = []
    lines = source.text.splitlines()
    for i, err in enumerate(reversed(chain)):
        fn = by_src.get(err.src)
        node = getattr(err, "node", None)
        line = col = None
        if fn is not None and node is not None and hasattr(node, "lineno"):
            def_line = _def_line(fn)
            line = def_line + node.lineno - 1
            indent = len(lines[def_line - 1]) - len(lines[def_line - 1].lstrip())
            col = node.col_offset + indent + 1
        message = err.error_message or str(err).strip().splitlines()[-1]
        if i > 0:
            message = f"in a call from kernel {fn.__name__ if fn else '?'}: {message}"
        diags.append(
            Diagnostic(
                line=line,
                column=col,
                severity="error" if i == 0 else "note",
                message=message,
                file=source.name,
                kernel=fn.__name__ if fn else None,
            )
        )
    if not diags:
        diags = [Diagnostic(message=f"{type(exc).__name__}: {str(exc).strip()[-2000:]}", file=source.name)]
    return diags


def skipped_by_autotuner(exc: BaseException) -> bool:
    """Errors Triton's autotuner catches while benchmarking: it drops the config and goes on."""
    from triton.compiler.errors import CompileTimeAssertionFailure
    from triton.runtime.errors import OutOfResources, PTXASError

    return isinstance(exc, (CompileTimeAssertionFailure, OutOfResources, PTXASError))


def merge_config_errors(failures: list[tuple[Launch, bool, list[Diagnostic]]], built: set[str]) -> list[Diagnostic]:
    """One copy of each distinct error; an error that several autotune configs hit names them all.
    Where the autotuner would drop the failing configs (a static_assert, ptxas) and another config
    of the kernel builds, the kernel still runs, so the error is a warning."""
    groups: dict[tuple, tuple[list[Diagnostic], list[str | None], list[bool]]] = {}
    for launch, skippable, diags in failures:
        key = (launch.kernel,) + tuple((d.line, d.column, d.severity, d.message) for d in diags)
        group = groups.setdefault(key, (diags, [], []))
        group[1].append(launch.config)
        group[2].append(skippable and launch.config is not None and launch.kernel in built)
    merged = []
    for diags, labels, skips in groups.values():
        diags = [d.model_copy() for d in diags]
        named = [label for label in labels if label]
        if named:
            which = "; ".join(f"[{label}]" for label in named)
            diags[0].message += f" (autotune config{'s' if len(named) > 1 else ''} {which})"
        if all(skips):
            diags[0].severity = "warning"
            diags[0].message += "; the autotuner drops these configs and runs the others"
        merged += diags
    return merged


def ptx_key(launch: Launch, taken: dict) -> str:
    """'kernel', or 'kernel [BLOCK=128, num_warps=4, num_stages=3]' for an autotune config; '#2' on a repeat."""
    base = launch.kernel if launch.config is None else f"{launch.kernel} [{launch.config}]"
    key, n = base, 2
    while key in taken:
        key, n = f"{base} #{n}", n + 1
    return key


def compile_launch(launch: Launch, fn, backend_target) -> tuple[KernelResources, str]:
    import triton
    from triton.compiler import ASTSource

    src = ASTSource(fn, launch.signature, constexprs=dict(launch.constexprs), attrs=dict(launch.attrs))
    compiled = triton.compile(src, target=backend_target, options=dict(launch.options))
    usage = cubin_resources(compiled.asm["cubin"]).get(compiled.name, {})
    ptx = compiled.asm["ptx"]
    resources = KernelResources(
        name=launch.kernel,
        config=launch.config,
        registers=usage.get("REG"),
        # ptxas puts register spills in the stack frame: the driver's local size (what Triton's own
        # n_spills counts, in words) is STACK + LOCAL; LOCAL alone said 0 for a kernel spilling 312 bytes
        spills=usage["STACK"] + usage.get("LOCAL", 0) if "STACK" in usage else usage.get("LOCAL"),
        shared_bytes=compiled.metadata.shared,
        stack_bytes=usage.get("STACK"),
        num_warps=compiled.metadata.num_warps,
        num_stages=compiled.metadata.num_stages,
        mma="wgmma" if "wgmma.mma_async" in ptx else "mma.sync" if "mma.sync" in ptx else "none",
        mma_serialized=serialized_or_none(ptx, f"sm_{backend_target.arch}a"),
        signature=launch.signature,
        constexprs={k: repr(v) for k, v in launch.named_constexprs().items()},
        divisible_by_16=launch.divisible_by_16(),
    )
    return resources, ptx


def serialized_or_none(ptx: str, arch: str) -> str | None:
    try:
        return wgmma_serialized(ptx, arch) or None
    except PtxasUnavailable:  # the compile report says nothing of it rather than guess
        return None


def serialized_warning(resources: KernelResources, file: str) -> Diagnostic:
    return Diagnostic(
        severity="warning",
        file=file,
        kernel=resources.name,
        message=f"{resources.name}: ptxas serializes its wgmma ({resources.mma_serialized}): each MMA waits for the "
        "one before it, so none overlaps the next or the loads. Read the accumulator only after the loop that "
        "issues the dots (a tile's epilogue after its own K loop, not in a branch of a flat persistent loop)",
    )


def toolchain() -> dict[str, str]:
    """The Triton and (bundled) ptxas that build here; a GPU machine's may differ."""
    import triton

    versions = {"triton": triton.__version__, "ptxas": tool_version("ptxas", prefer_triton_bundle=True)}
    return {k: v for k, v in versions.items() if v}


def compile_candidate(source: Source, arch: str | None, problem: Source | None, workdir: Path) -> CompileReport:
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    started = time.perf_counter()
    arch = arch or DEFAULT_ARCH
    target = GPUTarget("cuda", parse_arch(arch), 32)
    report = CompileReport(ok=False, target="triton", arch=arch, toolchain=toolchain())
    try:
        module = import_source(source, workdir, "candidate")
    except (InputError, SourceRuntimeError) as e:
        report.diagnostics = e.diagnostics
        report.seconds = time.perf_counter() - started
        return report
    kernels = jit_functions(module)
    if not kernels:
        report.diagnostics = [Diagnostic(message="no @triton.jit kernel found in the source", file=source.name)]
        return report
    diags: list[Diagnostic] = []
    if problem is not None:
        try:
            launches = trace_launches(module, problem, workdir, make_backend(target))
            report.signature_source = "traced"
        except (InputError, SourceRuntimeError):
            raise
        except Exception as e:  # noqa: BLE001  (candidate code can raise anything: diagnostics at its line)
            assert module.__file__ is not None  # import_source ran it from a file
            diags += diagnostics_from_exception(e, Path(module.__file__), source)
            diags[-1].message = "tracing ModelNew.forward on the problem's inputs failed: " + diags[-1].message
            report.diagnostics = diags
            return report
        if not launches:
            diags.append(
                Diagnostic(
                    severity="warning",
                    file=source.name,
                    message="ModelNew.forward launched no Triton kernel on the problem's inputs",
                )
            )
    else:
        launches, diags = infer_launches(kernels, autotune_configs(module), source.text)
        report.signature_source = "inferred"
    seen, failures = set(), []
    ptx: dict[str, str] = {}
    for launch in launches:
        if launch.key() in seen:
            continue
        seen.add(launch.key())
        try:
            resources, text = compile_launch(launch, kernels[launch.kernel], target)
        except Exception as e:  # noqa: BLE001  (Triton's compiler raises many types: each becomes a diagnostic)
            failures.append((launch, skipped_by_autotuner(e), compile_error_diagnostics(e, kernels, source)))
            continue
        report.kernels.append(resources)
        ptx[ptx_key(launch, ptx)] = text
        if resources.mma_serialized:
            diags.append(serialized_warning(resources, source.name))
    built = {k.name for k in report.kernels}
    diags = merge_config_errors(failures, built) + diags  # errors first: they are what to fix
    report.ptx = ptx or None
    report.ok = not any(d.severity == "error" for d in diags)
    report.diagnostics = diags
    report.seconds = time.perf_counter() - started
    return report
