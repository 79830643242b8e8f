"""nvcc and its outputs: running it, reading its messages and ptxas's resource lines as diagnostics
and kernel resources, demangling names, reading SASS from a cubin.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from kforge_mcp.core.errors import InputError
from kforge_mcp.core.problem import Source
from kforge_mcp.core.schemas import Diagnostic
from kforge_mcp.targets.cuda.build import InlineBuild
from kforge_mcp.targets.cuda.source import Block
from kforge_mcp.targets.nvidia import find_tool
from kforge_mcp.targets.source_map import Piece

# an error whose message names these may come from the lean stand-in, not from the candidate
LEAN_SUSPECT = re.compile(
    r"\b(at|c10|torch|pybind11|py)::|Tensor|TensorOptions|ScalarType|Half|BFloat16|__half|"
    r"__nv_bfloat16|scalar_t|kforge_lean|TORCH_|AT_|C10_|optional|IntArrayRef"
)
EDG = re.compile(
    r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<sev>catastrophic error|fatal error|error|warning|remark)"
    r"(?: #[\w-]+)?: (?P<msg>.*)$"
)
GCC = re.compile(
    r"^(?P<file>[^:\s][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<sev>fatal error|error|warning|note): (?P<msg>.*)$"
)
TOOL = re.compile(r"^(?P<tool>ptxas|nvcc|nvlink|fatbinary)\s*(?P<sev>fatal|error|warning)\s*: (?P<msg>.*)$")
_DROP_FLAGS = re.compile(
    r"^(-gencode|--generate-code|-arch|--gpu-architecture|-code|--gpu-code|-Xcompiler|-c$|-o$|-shared|-fPIC|-l|-L)"
)


def demangle(names: list[str]) -> dict[str, str]:
    tool = shutil.which("cu++filt") or find_tool("cu++filt") or shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    try:
        out = subprocess.run(
            [tool], input="\n".join(names), capture_output=True, text=True, timeout=30
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return {n: n for n in names}
    return {n: (d.strip() or n) for n, d in zip(names, out)} if len(out) == len(names) else {n: n for n in names}


@dataclass
class RawDiag:
    file: str
    line: int | None
    column: int | None
    severity: str
    message: str


def parse_compiler_output(text: str) -> list[RawDiag]:
    diags: list[RawDiag] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        raw = lines[i]
        m = EDG.match(raw)
        if m:
            sev = {"remark": "note", "catastrophic error": "error", "fatal error": "error"}.get(m["sev"], m["sev"])
            d = RawDiag(m["file"], int(m["line"]), None, sev, m["msg"].strip())
            j = i + 1
            # EDG echoes the source line and puts a caret under the column; notes follow, indented
            if j + 1 < len(lines) and re.fullmatch(r"\s*\^\s*", lines[j + 1]):
                d.column = max(1, lines[j + 1].index("^") - 1)  # EDG indents the echoed line by two
                j += 2
            while j < len(lines) and lines[j].startswith(
                ("          detected during", "            instantiation of", "            detected during")
            ):
                d.message += "; " + lines[j].strip()
                j += 1
            diags.append(d)
            i = j
            continue
        m = GCC.match(raw)
        if m and not raw.startswith(("ptxas", "nvcc")):
            sev = "error" if m["sev"] == "fatal error" else m["sev"]
            diags.append(RawDiag(m["file"], int(m["line"]), int(m["col"]) if m["col"] else None, sev, m["msg"].strip()))
        else:
            m = TOOL.match(raw)
            if m:
                sev = "error" if m["sev"] in ("fatal", "error") else "warning"
                diags.append(RawDiag(m["tool"], None, None, sev, f"{m['tool']}: {m['msg'].strip()}"))
        i += 1
    return diags


def parse_ptxas_resources(text: str) -> dict[str, dict[str, int]]:
    """``-Xptxas -v``: registers, shared memory, stack frame and spills per entry function."""
    result: dict[str, dict[str, int]] = {}
    entries: set[str] = set()
    current = None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            entries.add(m.group(1))
            current = result.setdefault(m.group(1), {})
            continue
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            current = result.setdefault(m.group(1), {})
            continue
        if current is None:
            continue
        for key, pattern in (
            ("stack", r"(\d+) bytes stack frame"),
            ("spill_stores", r"(\d+) bytes spill stores"),
            ("spill_loads", r"(\d+) bytes spill loads"),
            ("registers", r"Used (\d+) registers"),
            ("shared", r"(\d+) bytes smem"),
            ("barriers", r"used (\d+) barriers"),
        ):
            m = re.search(pattern, line)
            if m:
                current[key] = int(m.group(1))
    return {k: v for k, v in result.items() if k in entries}


@dataclass
class NvccRun:
    ok: bool
    output: str
    seconds: float
    cubin: Path | None
    ptx: Path | None
    command: list[str]


def run_nvcc(
    cu: Path, arch: str, includes: list[str], flags: list[str], workdir: Path, timeout_s: float = 600
) -> NvccRun:
    nvcc = find_tool("nvcc")
    if nvcc is None:
        raise InputError("nvcc not found: install the CUDA toolkit (or set CUDA_HOME) to compile CUDA sources")
    keep = workdir / f"keep-{cu.stem}"
    keep.mkdir(exist_ok=True)
    cubin = workdir / f"{cu.stem}.cubin"
    cmd = [
        nvcc,
        "-cubin",
        f"-arch={arch}",
        "-std=c++17",
        "-Xptxas",
        "-v",
        "-lineinfo",
        "--expt-relaxed-constexpr",
        "-keep",
        f"-keep-dir={keep}",
        *(f"-I{d}" for d in includes),
        *flags,
        "-o",
        str(cubin),
        str(cu),
    ]
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=workdir)
        output, ok = proc.stdout + proc.stderr, proc.returncode == 0
    except subprocess.TimeoutExpired as e:
        # TimeoutExpired carries bytes even with text=True
        stderr = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        output, ok = f"nvcc timed out after {timeout_s:.0f} s\n{stderr or ''}", False
    ptx = next(iter(sorted(keep.glob("*.ptx"))), None)
    return NvccRun(
        ok and cubin.exists(), output, time.perf_counter() - started, cubin if cubin.exists() else None, ptx, cmd
    )


def usable_flags(flags: list[str]) -> list[str]:
    out, skip = [], False
    for f in flags:
        if skip:
            skip = False
            continue
        if _DROP_FLAGS.match(f):
            skip = f in ("-gencode", "-arch", "-code", "-Xcompiler", "-o", "--gpu-architecture", "--gpu-code")
            continue
        out.append(f)
    return out


def cubin_sass(cubin: Path) -> str | None:
    tool = find_tool("cuobjdump")
    if tool is None:
        return None
    try:
        proc = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _locate(raw: RawDiag, file: str, pieces: list[Piece], blocks) -> tuple[Piece | None, Block | None, int | None]:
    """The piece and top-level block a mapped diagnostic falls in."""
    if raw.file != file or raw.line is None:
        return None, None, None
    for piece, piece_blocks in blocks:
        if raw.line in piece.lines:
            local = piece.lines.index(raw.line) + 1
            block = next((b for b in piece_blocks if b.start <= local <= b.end), None)
            return piece, block, local
    return None, None, None


def in_host_glue(r: RawDiag, file: str, pieces: list[Piece], blocks) -> bool:
    """Whether a message sits in host code of the candidate (a function neither __global__ nor __device__)."""
    _, block, _ = _locate(r, file, pieces, blocks)
    return block is not None and block.host_glue


def lean_errors_trusted(raw: list[RawDiag], file: str, pieces: list[Piece], blocks) -> bool:
    """Lean-path errors stand only when every one sits in device code of the candidate and
    names nothing the stand-in header could have got wrong."""
    errors = [r for r in raw if r.severity == "error"]
    if not errors:
        return False
    for r in errors:
        piece, block, _ = _locate(r, file, pieces, blocks)
        if piece is None or LEAN_SUSPECT.search(r.message):
            return False
        if block is None or block.host_glue:
            return False
    return True


def to_diagnostics(raw: list[RawDiag], source: Source, pieces: list[Piece], blocks, run: NvccRun) -> list[Diagnostic]:
    out = []
    for r in raw:
        if r.severity == "warning" and r.file != source.name:
            continue  # warnings from torch's or CUDA's own headers are noise to the candidate
        piece, block, _ = _locate(r, source.name, pieces, blocks)
        line = r.line if r.file == source.name else None
        message = r.message if r.file in (source.name, "ptxas", "nvcc") else f"{r.file}:{r.line}: {r.message}"
        out.append(
            Diagnostic(
                line=line,
                column=r.column if line else None,
                severity=r.severity,
                message=message,
                file=source.name,
                kernel=block.kernel if block else None,
            )
        )
    return out


def binding_diagnostics(build: InlineBuild, source: Source) -> list[Diagnostic]:
    """load_inline binds ``functions`` from declarations in cpp_sources; a name missing there
    fails its generated main.cpp, one declared but defined nowhere fails at import."""
    diags = []
    cpp, everything = "\n".join(build.cpp), "\n".join(build.cpp + build.cuda)
    for fn in build.functions:
        if build.cpp and not re.search(rf"\b{re.escape(fn)}\s*\(", cpp):
            diags.append(
                Diagnostic(
                    line=build.call_line,
                    file=source.name,
                    message=f"functions=[...] names '{fn}' but cpp_sources do not declare it: "
                    "load_inline's generated bindings would not compile",
                )
            )
        elif not re.search(rf"\b{re.escape(fn)}\s*\([^;{{]*\)\s*(const\s*)?(noexcept\s*)?\{{", everything):
            diags.append(
                Diagnostic(
                    line=build.call_line,
                    file=source.name,
                    message=f"'{fn}' is declared but not defined in cpp_sources or cuda_sources: "
                    "the extension would fail to load (undefined symbol)",
                )
            )
    return diags


def build_errors(text: str, file: str) -> list[Diagnostic]:
    """The errors in a build log, at lines of the candidate's file where they point there."""
    return [
        Diagnostic(
            line=r.line if r.file == file else None,
            column=r.column if r.file == file else None,
            severity=r.severity,
            message=r.message if r.file == file else f"{r.file}:{r.line}: {r.message}",
            file=file,
        )
        for r in parse_compiler_output(text)
        if r.severity == "error"
    ]
