"""CUDA C++ in KernelBench's form: Python that builds its kernels with
``torch.utils.cpp_extension.load_inline(name=..., cpp_sources=..., cuda_sources=..., functions=[...])``.

``compile`` never runs the candidate's build. The candidate is imported with ``load_inline``
swapped for a recorder, so module-level code runs and the CUDA strings it passes are
captured; each string is found again in the submitted file (``ast``) and written to a ``.cu``
with ``#line`` directives, so nvcc's messages point at lines of the Python file. nvcc then
compiles device code only (``-cubin``, ``-Xptxas -v``) for the chosen arch, without a GPU:

- the lean path (default) swaps torch's headers for a small stand-in (cuda_lean_header.py),
  a few seconds instead of ~80 s of parsing torch's headers on 2 cores;
- the full path uses torch's real headers; it runs when the lean path fails on something it
  cannot judge (host glue, a torch type), so a gap in the stand-in never becomes a false error.

``load`` (GPU only) runs the real ``load_inline``, with the same ``#line`` directives, in a
build directory keyed by source, flags, toolchain and arch, under a file lock.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sysconfig
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..problem import Source
from ..schemas import CompileReport, Diagnostic, Finding, KernelResources, TargetStatus
from ..source import SourceRuntimeError, import_source
from .base import find_tool
from .cuda_lean_header import TORCH_LEAN_H

DEFAULT_ARCH = "sm_90a"
NEEDS_GPU = "needs an NVIDIA GPU to run; compile works here"
TORCH_HEADER = re.compile(
    r'^[ \t]*#[ \t]*include[ \t]*[<"](torch/|ATen/|c10/|pybind11/|THC/|Python\.h)[^>"]*[>"]', re.M
)
CUTLASS_HEADER = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"](cute|cutlass)/', re.M)
# load_inline puts these before the CUDA sources; the full path does the same
LOAD_INLINE_CUDA_PREFIX = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
# an error whose message names these may come from the lean stand-in, not from the candidate
LEAN_SUSPECT = re.compile(
    r"\b(at|c10|torch|pybind11|py)::|Tensor|TensorOptions|ScalarType|Half|BFloat16|__half|"
    r"__nv_bfloat16|scalar_t|kforge_lean|TORCH_|AT_|C10_|optional|IntArrayRef"
)


# ---- toolchain ----


@functools.lru_cache(maxsize=1)
def nvcc_version() -> str | None:
    nvcc = find_tool("nvcc")
    if nvcc is None:
        return None
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\S+), V(\S+)", out)
    return m.group(2) if m else out.strip().splitlines()[-1:][0] if out.strip() else None


def normalize_arch(arch: str | None) -> str:
    """'sm_90a', '90a', '9.0', 'sm_100a' -> 'sm_90a' style, as nvcc's -arch wants it."""
    text = (arch or DEFAULT_ARCH).strip().lower()
    m = re.fullmatch(r"(?:sm_|compute_)?(\d{2,3})([af]?)", text) or re.fullmatch(r"(\d+)\.(\d)([af]?)", text)
    if not m:
        raise InputError(f"arch '{arch}' is not an NVIDIA arch such as sm_80, sm_90a or sm_100a")
    return f"sm_{m.group(1)}{m.group(2)}" if "." not in text else f"sm_{m.group(1)}{m.group(2)}{m.group(3)}"


def torch_include_dirs() -> list[str]:
    from torch.utils.cpp_extension import include_paths

    return [*include_paths(), sysconfig.get_paths()["include"]]


def cutlass_include_dir() -> str | None:
    """CuTe / CUTLASS C++ headers from the ``nvidia-cutlass`` wheel."""
    spec = importlib.util.find_spec("cutlass_library")
    if spec and spec.origin:
        inc = Path(spec.origin).parent / "source" / "include"
        if (inc / "cute").is_dir():
            return str(inc)
    return None


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


# ---- capturing load_inline calls ----


@dataclass
class InlineBuild:
    """One load_inline call the candidate made, with where its strings sit in the file."""

    kwargs: dict[str, Any]
    call_line: int | None
    cuda: list[str] = field(default_factory=list)
    cpp: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.kwargs.get("name") or "extension")

    @property
    def functions(self) -> list[str]:
        fns = self.kwargs.get("functions") or []
        if isinstance(fns, str):
            return [fns]
        return list(fns.keys()) if isinstance(fns, dict) else list(fns)

    def flags(self) -> list[str]:
        flags = self.kwargs.get("extra_cuda_cflags") or []
        return [flags] if isinstance(flags, str) else list(flags)


def _as_list(value) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


class StubExtension(types.ModuleType):
    """What ``load_inline`` returns while compiling: its functions exist but do not run."""

    def __init__(self, name: str, functions: list[str]):
        super().__init__(name)
        for fn in functions:
            setattr(self, fn, self._stub(fn))

    @staticmethod
    def _stub(fn: str):
        def call(*args, **kwargs):
            raise RuntimeError(f"{fn}: kforge compile-only stub (the extension is built and run by verify on a GPU)")

        return call

    def __getattr__(self, item):
        if item.startswith("__"):
            raise AttributeError(item)
        return self._stub(item)


def _caller_line(path: Path) -> int | None:
    import traceback

    for frame in reversed(traceback.extract_stack()):
        if frame.filename == str(path):
            return frame.lineno
    return None


@contextlib.contextmanager
def patched_load_inline(replacement):
    """Swap ``torch.utils.cpp_extension.load_inline`` while the candidate is imported
    (``from torch.utils.cpp_extension import load_inline`` then binds the replacement)."""
    import torch.utils.cpp_extension as cpp_extension

    real = cpp_extension.load_inline
    cpp_extension.load_inline = replacement
    try:
        yield real
    finally:
        cpp_extension.load_inline = real


def capture_builds(source: Source, workdir: Path) -> tuple[types.ModuleType, list[InlineBuild]]:
    builds: list[InlineBuild] = []
    candidate_path: list[Path] = []

    def recorder(name, cpp_sources=None, cuda_sources=None, functions=None, *args, **kwargs):
        kwargs.update(name=name, cpp_sources=cpp_sources, cuda_sources=cuda_sources, functions=functions)
        line = _caller_line(candidate_path[0]) if candidate_path else None
        builds.append(InlineBuild(kwargs, line, _as_list(cuda_sources), _as_list(cpp_sources)))
        fns = functions if not isinstance(functions, str) else [functions]
        return StubExtension(str(name), list(fns.keys()) if isinstance(fns, dict) else list(fns or []))

    from .. import source as loader

    real_write = loader.write_source

    def remember(src, wd, stem):  # the recorder needs the file path to find its call site
        path = real_write(src, wd, stem)
        candidate_path.append(path)
        return path

    loader.write_source = remember
    try:
        with patched_load_inline(recorder):
            module = import_source(source, workdir, "candidate")
    finally:
        loader.write_source = real_write
    return module, builds


# ---- mapping CUDA strings back to lines of the Python file ----


@dataclass
class Piece:
    """One CUDA or C++ source string, and the Python line of each of its lines (None: unknown)."""

    text: str
    lines: list[int | None]
    label: str

    def annotated(self, file: str) -> str:
        """The text with ``#line`` directives wherever its lines stop running on consecutively."""
        out, expected, continued = [], None, False
        for text, line in zip(self.text.split("\n"), self.lines):
            if line is not None and line != expected and not continued:
                out.append(f'#line {line} "{file}"')
            out.append(text)
            expected = None if line is None else line + 1
            continued = text.rstrip().endswith("\\")
        return "\n".join(out)


def _string_constants(text: str) -> list[tuple[ast.Constant, str]]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) >= 8:
            found.append((node, ast.get_source_segment(text, node) or ""))
    return found


def _map_constant(value: str, node: ast.Constant, segment: str, src_lines: list[str]) -> list[int | None]:
    n = value.count("\n") + 1
    if segment.count("\n") == value.count("\n"):  # a plain (triple-quoted) literal: lines match one to one
        return [node.lineno + i for i in range(n)]
    # escapes or implicit concatenation: find each line in the file, in order
    out: list[int | None] = []
    cursor = node.lineno
    for text in value.split("\n"):
        key = text.strip()
        line = None
        if key:
            for ln in range(cursor, min(node.end_lineno, len(src_lines)) + 1):
                if key in src_lines[ln - 1]:
                    line = ln
                    break
        if line is None:
            line = cursor
        out.append(line)
        cursor = line
    return out


def map_pieces(strings: list[str], text: str, label: str) -> list[Piece]:
    constants = _string_constants(text)
    src_lines = text.splitlines()
    pieces = []
    for i, value in enumerate(strings):
        lines: list[int | None] = [None] * (value.count("\n") + 1)
        exact = next(((n, s) for n, s in constants if n.value == value), None)
        if exact:
            lines = _map_constant(value, exact[0], exact[1], src_lines)
        else:  # built from parts: map every literal found inside it
            for node, seg in sorted(constants, key=lambda c: -len(c[0].value)):
                at = value.find(node.value)
                if at < 0 or (at > 0 and value[at - 1] != "\n"):
                    continue
                first = value[:at].count("\n")
                sub = _map_constant(node.value, node, seg, src_lines)
                if all(x is None for x in lines[first : first + len(sub)]):
                    lines[first : first + len(sub)] = sub
        pieces.append(Piece(value, lines, f"{label}[{i}]"))
    return pieces


# ---- scanning C++ for function blocks (which lines are kernels, which are host glue) ----


@dataclass
class Block:
    start: int  # 1-based lines in the piece
    end: int
    header: str

    @property
    def kernel(self) -> str | None:
        if "__global__" not in self.header:
            return None
        names = [n for n in re.findall(r"(\w+)\s*\(", self.header) if n not in ("__launch_bounds__", "__align__")]
        return names[0] if names else None

    @property
    def host_glue(self) -> bool:
        return "__global__" not in self.header and "__device__" not in self.header


def top_level_blocks(code: str) -> list[Block]:
    """Top-level ``{...}`` blocks (namespaces are looked into) with the text before each."""
    blocks: list[Block] = []
    depth, line, header, start = 0, 1, [], 0
    namespace_depths: list[int] = []
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if code.startswith("//", i):
            j = code.find("\n", i)
            i = n if j < 0 else j
            continue
        if code.startswith("/*", i):
            j = code.find("*/", i + 2)
            j = n if j < 0 else j + 2
            line += code.count("\n", i, j)
            i = j
            continue
        if c in "\"'":
            j = i + 1
            while j < n and code[j] != c and code[j] != "\n":
                j += 2 if code[j] == "\\" else 1
            i = j + 1
            continue
        if c == "#" and depth == len(namespace_depths) and not "".join(header).strip():
            j = code.find("\n", i)
            while j > 0 and code[j - 1] == "\\":
                line += 1
                j = code.find("\n", j + 1)
            i = n if j < 0 else j
            continue
        if c == "\n":
            line += 1
        if depth == len(namespace_depths):
            if c == "{":
                head = "".join(header)
                if re.search(r"\bnamespace\b[^;]*$", head) or re.search(r'extern\s*"C"\s*$', head.strip()):
                    namespace_depths.append(depth + 1)
                    header = []
                else:
                    start = line
                    blocks.append(Block(start, start, head.strip()))
                depth += 1
            elif c in ";}":
                header = []
                if c == "}" and namespace_depths and namespace_depths[-1] == depth:
                    namespace_depths.pop()
                    depth -= 1
            else:
                header.append(c)
        else:
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == len(namespace_depths) and blocks:
                    blocks[-1].end = line
                    header = []
        i += 1
    return blocks


# ---- nvcc output ----

EDG = re.compile(
    r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<sev>catastrophic error|fatal error|error|warning|remark)"
    r"(?: #[\w-]+)?: (?P<msg>.*)$"
)
GCC = re.compile(
    r"^(?P<file>[^:\s][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<sev>fatal error|error|warning|note): (?P<msg>.*)$"
)
TOOL = re.compile(r"^(?P<tool>ptxas|nvcc|nvlink|fatbinary)\s*(?P<sev>fatal|error|warning)\s*: (?P<msg>.*)$")


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


# ---- one nvcc run ----


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
        output, ok = f"nvcc timed out after {timeout_s:.0f} s\n{e.stderr or ''}", False
    ptx = next(iter(sorted(keep.glob("*.ptx"))), None)
    return NvccRun(
        ok and cubin.exists(), output, time.perf_counter() - started, cubin if cubin.exists() else None, ptx, cmd
    )


# flags that only make sense for a real build, or that nvcc -cubin refuses
_DROP_FLAGS = re.compile(
    r"^(-gencode|--generate-code|-arch|--gpu-architecture|-code|--gpu-code|-Xcompiler|-c$|-o$|-shared|-fPIC|-l|-L)"
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


# ---- the target ----


class CudaTarget:
    name = "cuda"
    summary = "CUDA C++ through torch.utils.cpp_extension.load_inline (KernelBench form)"

    def probe(self, devices: list[str]) -> TargetStatus:
        import torch

        nvcc = find_tool("nvcc")
        versions = {
            k: v
            for k, v in {"nvcc": nvcc_version(), "torch": torch.__version__, "torch cuda": torch.version.cuda}.items()
            if v
        }
        gpus = [d for d in devices if d.startswith("cuda")]
        notes = []
        if nvcc:
            notes.append(
                f"compile: nvcc -cubin for any NVIDIA arch (default {DEFAULT_ARCH}), no GPU needed; kernels "
                "compile against a lean stand-in for torch's headers (seconds), falling back to the real "
                "headers (~1-5 min on a small CPU) when host code needs judging"
            )
        if cutlass_include_dir():
            notes.append("CuTe / CUTLASS C++ headers (nvidia-cutlass) are on the include path")
        if nvcc is None:
            reason = "nvcc not found: install the CUDA toolkit (or set CUDA_HOME)"
            return TargetStatus(name=self.name, available=False, reason=reason, versions=versions, notes=notes)
        if not gpus:
            return TargetStatus(
                name=self.name, available=False, reason=NEEDS_GPU, can_compile=True, versions=versions, notes=notes
            )
        if torch.version.cuda is None:
            return TargetStatus(
                name=self.name,
                available=False,
                can_compile=True,
                versions=versions,
                notes=notes,
                reason="this torch build has no CUDA support; install a CUDA build of torch",
            )
        return TargetStatus(
            name=self.name, available=True, devices=gpus, can_compile=True, versions=versions, notes=notes
        )

    def check(self, source: Source) -> list[Finding]:
        if "load_inline" not in source.text:
            return [
                Finding(
                    code="no_load_inline",
                    message="the candidate never calls torch.utils.cpp_extension.load_inline: a CUDA candidate "
                    "builds its kernels with load_inline(cpp_sources=..., cuda_sources=..., functions=[...])",
                )
            ]
        return []

    def execution(self, device: str) -> str:
        return device.split(":")[0]

    # ---- compile ----

    def compile(self, source: Source, arch: str | None, problem: Source | None, workdir: Path) -> CompileReport:
        started = time.perf_counter()
        arch = normalize_arch(arch)
        report = CompileReport(ok=False, target=self.name, arch=arch)
        try:
            _, builds = capture_builds(source, workdir)
        except (InputError, SourceRuntimeError) as e:
            report.diagnostics = e.diagnostics
            report.seconds = time.perf_counter() - started
            return report
        if not builds or not any(b.cuda for b in builds):
            report.diagnostics = [
                Diagnostic(
                    file=source.name,
                    message="no load_inline(..., cuda_sources=...) call ran "
                    "while importing the candidate: nothing to compile",
                )
            ]
            report.seconds = time.perf_counter() - started
            return report
        diags: list[Diagnostic] = []
        ok = True
        for i, build in enumerate(builds):
            b_ok, b_diags = self._compile_build(build, i, source, arch, workdir, report)
            ok, diags = ok and b_ok, diags + b_diags
        report.diagnostics = diags
        report.ok = ok and not any(d.severity == "error" for d in diags)
        report.signature_source = "source"
        report.seconds = time.perf_counter() - started
        return report

    def _compile_build(
        self, build: InlineBuild, index: int, source: Source, arch: str, workdir: Path, report: CompileReport
    ) -> tuple[bool, list[Diagnostic]]:
        diags = binding_diagnostics(build, source)
        if not build.cuda:
            return not diags, diags
        pieces = map_pieces(build.cuda, source.text, "cuda_sources")
        includes = []
        uses_cutlass = any(CUTLASS_HEADER.search(p.text) for p in pieces)
        if uses_cutlass:
            inc = cutlass_include_dir()
            if inc:
                includes.append(inc)
            else:
                diags.append(
                    Diagnostic(
                        severity="warning",
                        file=source.name,
                        line=build.call_line,
                        message="the source includes CuTe/CUTLASS headers but nvidia-cutlass is not "
                        "installed (pip install nvidia-cutlass)",
                    )
                )
        flags = usable_flags(build.flags())
        blocks = [(p, top_level_blocks(p.text)) for p in pieces]

        lean_cu = workdir / f"lean_{index}.cu"
        (workdir / "kforge_torch_lean.h").write_text(TORCH_LEAN_H)
        lean_cu.write_text(
            '#include "kforge_torch_lean.h"\n' + "\n".join(lean_piece(p).annotated(source.name) for p in pieces) + "\n"
        )
        run = run_nvcc(lean_cu, arch, [str(workdir), *includes], flags, workdir)
        mode = "lean"
        raw = parse_compiler_output(run.output)
        if not run.ok and not lean_errors_trusted(raw, source.name, pieces, blocks):
            full_cu = workdir / f"full_{index}.cu"
            full_cu.write_text(LOAD_INLINE_CUDA_PREFIX + "\n".join(p.annotated(source.name) for p in pieces) + "\n")
            run = run_nvcc(full_cu, arch, [*torch_include_dirs(), *includes], flags, workdir)
            mode = "full"
            raw = parse_compiler_output(run.output)
        diags += to_diagnostics(raw, source, pieces, blocks, run)
        if not run.ok and not any(d.severity == "error" for d in diags):
            diags.append(
                Diagnostic(file=source.name, line=build.call_line, message="nvcc failed: " + run.output.strip()[-2000:])
            )
        if run.ok:
            self._resources(run, report, build)
        diags.append(
            Diagnostic(
                severity="note",
                file=source.name,
                line=build.call_line,
                message=f"load_inline '{build.name}': nvcc -cubin -arch={arch} ({mode} path: "
                + (
                    "torch's headers replaced by kforge's lean stand-in; host code is checked "
                    "loosely, the real build runs in verify"
                    if mode == "lean"
                    else "torch's real headers"
                )
                + f") in {run.seconds:.1f} s",
            )
        )
        return run.ok, diags

    def _resources(self, run: NvccRun, report: CompileReport, build: InlineBuild) -> None:
        usage = parse_ptxas_resources(run.output)
        names = demangle(list(usage))
        for mangled, u in usage.items():
            pretty = names.get(mangled, mangled)
            report.kernels.append(
                KernelResources(
                    name=pretty,
                    registers=u.get("registers"),
                    spills=u.get("spill_stores"),
                    shared_bytes=u.get("shared", 0),
                    stack_bytes=u.get("stack"),
                    signature={"symbol": mangled, "extension": build.name, "spill_loads": str(u.get("spill_loads", 0))},
                )
            )
        if run.ptx is not None:
            report.ptx = (report.ptx or {}) | {build.name: run.ptx.read_text(errors="replace")}
        if run.cubin is not None and hasattr(report, "sass"):
            sass = cubin_sass(run.cubin)
            if sass:
                report.sass = (report.sass or {}) | {build.name: sass}

    # ---- load (GPU) ----

    def load(self, source: Source, device: str, workdir: Path) -> types.ModuleType:
        import torch

        if not device.startswith("cuda") or not torch.cuda.is_available():
            raise InputError(f"target 'cuda' needs an NVIDIA GPU to run (device '{device}')")
        major, minor = torch.cuda.get_device_capability(torch.device(device))
        arch = f"sm_{major}{minor}"
        errors: list[Diagnostic] = []

        def building(real, name, cpp_sources=None, cuda_sources=None, functions=None, *args, **kwargs):
            cuda = map_pieces(_as_list(cuda_sources), source.text, "cuda_sources")
            cpp = map_pieces(_as_list(cpp_sources), source.text, "cpp_sources")
            cuda_src = [p.annotated(source.name) for p in cuda]
            cpp_src = [p.annotated(source.name) for p in cpp]
            flags = kwargs.get("extra_cuda_cflags") or []
            includes = list(kwargs.get("extra_include_paths") or [])
            if any(CUTLASS_HEADER.search(p.text) for p in cuda) and cutlass_include_dir():
                includes.append(cutlass_include_dir())
                kwargs["extra_include_paths"] = includes
            key = hashlib.sha256(
                json.dumps(
                    {
                        "name": name,
                        "cpp": cpp_src,
                        "cuda": cuda_src,
                        "functions": functions,
                        "flags": flags,
                        "cflags": kwargs.get("extra_cflags"),
                        "ldflags": kwargs.get("extra_ldflags"),
                        "includes": includes,
                        "torch": torch.__version__,
                        "torch_cuda": torch.version.cuda,
                        "nvcc": nvcc_version(),
                        "arch": arch,
                    },
                    sort_keys=True,
                    default=str,
                ).encode()
            ).hexdigest()[:20]
            build_dir = extension_cache_dir() / f"{name}-{key}"
            build_dir.mkdir(parents=True, exist_ok=True)
            kwargs.pop("build_directory", None)
            kwargs.setdefault("verbose", False)
            from filelock import FileLock

            env_arch = os.environ.get("TORCH_CUDA_ARCH_LIST")
            os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}{'a' if major >= 9 else ''}"
            try:
                with FileLock(str(build_dir) + ".lock", timeout=1800):
                    # keywords only: load_inline's positional order differs across torch versions (sycl_sources)
                    return real(
                        f"{name}_{key}",
                        cpp_src,
                        *args,
                        cuda_sources=cuda_src,
                        functions=functions,
                        build_directory=str(build_dir),
                        **kwargs,
                    )
            except Exception as e:
                text = str(e)
                raw = parse_compiler_output(text)
                errors.extend(
                    Diagnostic(
                        line=r.line if r.file == source.name else None,
                        column=r.column if r.file == source.name else None,
                        severity=r.severity,
                        message=r.message if r.file == source.name else f"{r.file}:{r.line}: {r.message}",
                        file=source.name,
                    )
                    for r in raw
                    if r.severity == "error"
                )
                raise
            finally:
                if env_arch is None:
                    os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
                else:
                    os.environ["TORCH_CUDA_ARCH_LIST"] = env_arch

        holder: dict = {}

        def replacement(*args, **kwargs):
            return building(holder["real"], *args, **kwargs)

        try:
            with patched_load_inline(replacement) as real:
                holder["real"] = real
                return import_source(source, workdir, "candidate")
        except SourceRuntimeError as e:
            if not errors:
                raise
            # the build log is in the exception text; the parsed errors say it shorter
            call = [
                Diagnostic(line=d.line, severity="note", file=source.name, message="the load_inline build failed here")
                for d in e.diagnostics[:1]
            ]
            summary = "; ".join(f"line {d.line}: {d.message}" if d.line else d.message for d in errors[:3])
            raise SourceRuntimeError(f"{source.name}: load_inline build failed: {summary}", errors + call) from None


def extension_cache_dir() -> Path:
    """Built extensions live under the engine home (the pool points TORCH_EXTENSIONS_DIR there)."""
    base = os.environ.get("TORCH_EXTENSIONS_DIR")
    if not base:
        triton_cache = os.environ.get("TRITON_CACHE_DIR")
        base = (
            str(Path(triton_cache).parent / "torch_extensions")
            if triton_cache
            else str(Path.home() / ".kforge" / "cache" / "torch_extensions")
        )
    path = Path(base) / "kforge-cuda"
    path.mkdir(parents=True, exist_ok=True)
    return path


def cubin_sass(cubin: Path) -> str | None:
    tool = find_tool("cuobjdump")
    if tool is None:
        return None
    try:
        proc = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def lean_piece(piece: Piece) -> Piece:
    """The same lines with torch/pybind includes commented out (the lean header stands in)."""
    text = TORCH_HEADER.sub(lambda m: "// kforge lean: " + m.group(0).strip(), piece.text)
    return Piece(text, piece.lines, piece.label)


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
