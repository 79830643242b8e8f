"""Which path builds each CUDA corpus source (tests/cuda_sources/), and how long its builds take.

On a GPU machine, for each source, a fresh KFORGE_HOME (an empty build cache, nothing precompiled) and an
engine of its own: verify cold, verify after a one-character edit of the kernel (``;`` after the first
kernel's opening brace: only the device unit changes), verify again unchanged, then an edit that adds a line
to the kernel (the host unit, which keeps the source's line numbers, compiles again). Each step records the
verdict, the path that built the extension (split or stock, and why stock), the units compiled or reused
with their seconds, and the wall time of the call. Progress lines go to stderr with the elapsed time.
``--server warm`` runs the corpus on one running server instead (its first verify, of a source outside the corpus,
pays the worker's start and the headers): each source's cold step is what a client of a running server waits.
Baselines are eager only by default (torch.compile's cold start would dominate every cold step and is
measured elsewhere); ``--baselines eager,compiled`` times both.

``--compile-only`` (no GPU needed): the same steps as the split build runs them on a GPU machine, units
compiled and nothing linked (``load_candidate(..., prebuild=True, link=False)`` for sm_90), plus
``CudaTarget.compile`` of the source; each source on an empty extension cache, with precompiled headers
off (``--pch on``: the lean headers precompiled first, as a GPU server does at its probe).

    python bench/cuda_fast_build.py --out bench/results/cuda-fast-build/h100.json
    python bench/cuda_fast_build.py --compile-only --out bench/results/cuda-fast-build/cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS_DIR = ROOT / "tests/cuda_sources"
STARTED = time.perf_counter()


def progress(message: str) -> None:
    print(f"[{time.perf_counter() - STARTED:7.1f} s] {message}", file=sys.stderr, flush=True)


def kernel_edit(text: str, added: str = ";") -> str:
    """One character more in the first kernel's body: an empty statement after its opening brace."""
    at = text.index("{", text.index("__global__")) + 1
    return text[:at] + added + text[at:]


def steps_of(text: str) -> tuple[tuple[str, str], ...]:
    """cold, the one-character edit, the same again, then an edit that adds a line to the kernel (the host
    code below it moves down a line, and the host unit, which keeps the source's line numbers, compiles again)."""
    return (
        ("cold", text),
        ("kernel_edit", kernel_edit(text)),
        ("again", kernel_edit(text)),
        ("line_edit", kernel_edit(text, ";\n;")),
    )


def build_summary(findings: list) -> dict:
    build = next((f for f in findings if f.get("code") == "cuda_build"), None)
    ev = (build or {}).get("evidence", {})
    return {
        k: ev[k]
        for k in ("path", "seconds", "compiled", "linked", "reused", "fallback", "pch", "nvcc_steps", "first_build")
        if k in ev
    }


class Server:
    """An engine with its home and a folder of sources. ``fresh``: one per corpus source (an empty build cache, a
    worker to start: a first call ever); ``warm``: one for the whole corpus, whose first verify (WARM_UP, not in
    the corpus) paid the worker's start, torch's import and the precompiled headers, as a running server has."""

    def __init__(self) -> None:
        from kforge_mcp.api import Engine

        self.tmp = tempfile.TemporaryDirectory(prefix="kforge-fast-build-")
        self.scratch = Path(self.tmp.name) / "sources"
        self.scratch.mkdir()
        self.engine = Engine(
            home=Path(self.tmp.name) / "home", allow_dirs=[CORPUS_DIR, self.scratch, ROOT / "examples"]
        )

    def verify(self, problem: str, name: str, source: str, baselines: list[str]) -> tuple[float, dict]:
        path = self.scratch / name
        path.write_text(source)
        t0 = time.perf_counter()
        report = self.engine.verify(problem, str(path), target="cuda", baselines=baselines).model_dump()
        return round(time.perf_counter() - t0, 2), report

    def close(self) -> None:
        self.engine.close()
        self.tmp.cleanup()


WARM_UP = (ROOT / "examples/problems/fused_bias_gelu.py", ROOT / "examples/candidates/fused_bias_gelu/cuda.py")


def warm_server(baselines: list[str]) -> tuple[Server, dict]:
    server = Server()
    problem, candidate = WARM_UP
    seconds, report = server.verify(str(problem), "warm_up.py", candidate.read_text(), baselines)
    progress(f"server warm-up ({candidate.name}): {report.get('verdict')} in {seconds:.1f} s")
    return server, {"seconds": seconds, "verdict": report.get("verdict"), "source": str(candidate.relative_to(ROOT))}


def gpu_source(entry: dict, baselines: list[str], server: Server | None) -> dict:
    text = (CORPUS_DIR / entry["candidate"]).read_text()
    problem = str(CORPUS_DIR / entry["problem"])
    steps = {}
    own = server is None
    server = server or Server()
    try:
        for step, source in steps_of(text):
            seconds, report = server.verify(problem, f"{step}_{entry['candidate']}", source, baselines)
            steps[step] = {
                "seconds": seconds,
                "verdict": report.get("verdict"),
                "build": build_summary(report.get("findings", [])),
                "phases": report.get("phases") or {},  # where the verify's seconds went, the build's included
                "errors": report.get("errors", [])[:3],
            }
            b = steps[step]["build"]
            b = b.get("first_build") or b  # a worker that prebuilt the extension reports the build it waited on there
            progress(
                f"{entry['candidate']}: {step} {report.get('verdict')} in {seconds:.1f} s "
                f"({b.get('path', '?')} build, compiled {'+'.join(b.get('compiled') or {}) or 'nothing'})"
            )
    finally:
        if own:
            server.close()
    return steps


def cpu_source(entry: dict, pch: bool) -> dict:
    from kforge_mcp.core.problem import Source
    from kforge_mcp.core.settings import Settings
    from kforge_mcp.targets.cuda.load import load_candidate
    from kforge_mcp.targets.cuda.target import CudaTarget

    text = (CORPUS_DIR / entry["candidate"]).read_text()
    name = str(CORPUS_DIR / entry["candidate"])
    steps: dict = {}
    with tempfile.TemporaryDirectory(prefix="kforge-fast-build-") as scratch:
        ext = Path(scratch) / "ext"
        os.environ["TORCH_EXTENSIONS_DIR"] = str(ext)
        if pch:
            prewarm_and_wait(ext)
        t0 = time.perf_counter()
        report = CudaTarget(Settings.read()).compile(
            Source(text=text, name=name), "sm_90", None, Path(tempfile.mkdtemp(dir=scratch))
        )
        steps["compile"] = {
            "seconds": round(time.perf_counter() - t0, 2),
            "ok": report.ok,
            "errors": [d.message for d in report.diagnostics if d.severity == "error"][:3],
        }
        progress(f"{entry['candidate']}: compile {'ok' if report.ok else 'FAILED'} in {steps['compile']['seconds']} s")
        for step, source in steps_of(text):
            builds: list = []
            t0 = time.perf_counter()
            error = None
            try:
                workdir = Path(tempfile.mkdtemp(dir=scratch))
                settings = Settings.read()
                load_candidate(
                    Source(text=source, name=name), (9, 0), workdir, builds, settings, prebuild=True, link=False
                )
            except Exception as e:  # noqa: BLE001  (a candidate error: recorded, the bench goes on)
                error = f"{type(e).__name__}: {str(e)[:300]}"
            b = vars(builds[0]) if builds else {}
            steps[step] = {
                "seconds": round(time.perf_counter() - t0, 2),
                "build": {
                    k: b[k]
                    for k in (
                        "path",
                        "compiled",
                        "reused",
                        "fallback",
                        "pch",
                        "headers",
                        "nvcc_steps",
                        "likely_instantiations",
                    )
                    if k in b
                },
                "error": error,
            }
            progress(
                f"{entry['candidate']}: {step} {b.get('path', 'error')} in {steps[step]['seconds']} s "
                f"(compiled {b.get('compiled') or 'nothing'}{'; ' + str(b.get('fallback')) if b.get('fallback') else ''})"
            )
    return steps


def prewarm_and_wait(ext: Path) -> None:
    """The lean headers precompiled before the first build, as a GPU server's probe starts them."""
    import torch.utils.cpp_extension as ce

    from kforge_mcp.targets.cuda.build import extension_cache_dir
    from kforge_mcp.targets.cuda.build_plan import plan_build, toolchain_id
    from kforge_mcp.targets.cuda.fast_build import pchs_for
    from kforge_mcp.targets.cuda.preludes import PREWARMED

    plan = plan_build(ce.load_inline, "kforge_pch_plan", "", "__global__ void k() {}", [], {}, ext / "plan")
    pchs = pchs_for(plan, extension_cache_dir(), toolchain_id(plan), PREWARMED)
    for p in pchs.values():
        p.start_build()
    while not all(p.ready for p in pchs.values()):
        time.sleep(0.5)


def missing_headers(entry: dict) -> list[str]:
    from kforge_mcp.targets.nvidia import find_tool

    nvcc = find_tool("nvcc")
    include = Path(nvcc).resolve().parents[1] / "include" if nvcc else Path("/nonexistent")
    return [h for h in entry.get("toolkit_headers", []) if not (include / h).exists()]


UNITS = ("host", "device", "main")  # the split build's units, in the tables' order


def linked(build: dict) -> str:
    """The link's parts: the host library (linked once per host code and bindings, else reused), the kernels."""
    parts = build.get("linked") or {}
    return " + ".join(f"{part} {s:.2f}" for part, s in parts.items()) or "-"


def markdown(result: dict) -> str:
    cpu = result["mode"] == "compile-only"
    lines = [
        f"# CUDA corpus builds ({result['label']})",
        "",
        f"`{result['command']}`; {result['when']}; {result['machine']}; the kernels' nvcc steps "
        f"{result.get('nvcc_steps', 'in-turn')} (`KFORGE_CUDA_NVCC_STEPS`).",
        "",
    ]
    if result.get("warm_up"):
        w = result["warm_up"]
        lines += [
            f"One running server for the whole corpus: its first verify ({w['source']}, not in the corpus) took "
            f"{w['seconds']:.1f} s ({w['verdict']}): the worker's start, torch's import, the CUDA context and the "
            "precompiled headers. A source's cold step is then its first verify on that server.",
            "",
        ]
    if cpu:
        lines += [
            "Units compiled as the split build compiles them for sm_90, nothing linked; seconds are each unit's own",
            "compile (they run side by side), wall is the step. `compile` is `CudaTarget.compile` (lean nvcc and the",
            "host unit with torch's headers).",
            "",
            "| source | compile | path | cold: host / device / bindings | cold wall | kernel edit: device, wall | again "
            "| a line added: wall |",
            "|---|---|---|---|---|---|---|---|",
        ]
    else:
        lines += [
            "| source | path | cold | kernel edit | again | cold: host / device / bindings; link (s) "
            "| edit: device; link (s) | a line added: wall; compiled (s) |",
            "|---|---|---|---|---|---|---|---|",
        ]
    for name, steps in result["sources"].items():
        if "skipped" in steps:
            lines.append(f"| {name} | skipped: {steps['skipped']} |" + " |" * (6 if cpu else 5))
            continue
        cold, edit, again = steps["cold"], steps["kernel_edit"], steps["again"]
        line = steps.get("line_edit")
        line_wall = f"{line['seconds']:.2f} s" if line else "-"
        path = cold["build"].get("path", "error")
        if cold["build"].get("fallback"):
            path += f" ({cold['build']['fallback'][:80]})"
        if cpu:
            c = cold["build"].get("compiled", {})
            units = " / ".join(f"{c[u]:.1f}" if u in c else "-" for u in UNITS)
            e = edit["build"].get("compiled", {})
            lines.append(
                f"| {name} | {'ok' if steps['compile']['ok'] else 'rejected'} {steps['compile']['seconds']:.1f} s "
                f"| {path} | {units} | {cold['seconds']:.1f} s | {e.get('device', 0):.2f} s, {edit['seconds']:.2f} s "
                f"| {again['seconds']:.1f} s | {line_wall} |"
            )
        else:  # on a server the build ran ahead (or in the verify): the extension's first build says how
            c, e = (step["build"].get("first_build") or step["build"] for step in (cold, edit))
            units = " / ".join(f"{c['compiled'][u]:.1f}" if u in c.get("compiled", {}) else "-" for u in UNITS)
            lines.append(
                f"| {name} | {path} | {cold['verdict']} {cold['seconds']:.1f} s | {edit['verdict']} {edit['seconds']:.1f} s "
                f"| {again['verdict']} {again['seconds']:.1f} s | {units}; {linked(c)} "
                f"| {e.get('compiled', {}).get('device', 0):.2f}; {linked(e)} | {line_wall}; {compiled(line)} |"
            )
    for step, what in (("kernel_edit", "Kernel edit"), ("line_edit", "Kernel edit that adds a line")):
        walls = [s[step]["seconds"] for s in result["sources"].values() if step in s]
        if walls:
            lines += [
                "",
                f"{what}, wall: median {statistics.median(walls):.2f} s, {min(walls):.2f}-{max(walls):.2f} s.",
            ]
    return "\n".join(lines) + "\n"


def compiled(step: dict | None) -> str:
    """The units a step compiled, with their seconds."""
    if not step:
        return "-"
    b = step["build"].get("first_build") or step["build"]
    return ", ".join(f"{u} {t:.2f}" for u, t in (b.get("compiled") or {}).items()) or "nothing"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--compile-only", action="store_true", help="no GPU: compile the units, link nothing")
    ap.add_argument("--pch", choices=["on", "off"], default="off", help="--compile-only: precompile the headers first")
    ap.add_argument("--baselines", default="eager", help="GPU: baselines each verify times (eager,compiled)")
    ap.add_argument("--only", default="", help="comma-separated corpus file names (default: all)")
    ap.add_argument(
        "--server",
        choices=["fresh", "warm"],
        default="fresh",
        help="GPU: an engine and empty home per source (fresh), or one running server for all (warm)",
    )
    ap.add_argument("--out", type=Path, help="the .json to write; the .md goes beside it")
    args = ap.parse_args()

    corpus = json.loads((CORPUS_DIR / "corpus.json").read_text())["sources"]
    if args.only:
        corpus = [e for e in corpus if e["candidate"].removesuffix(".py") in args.only.split(",")]
    os.environ["KFORGE_CUDA_PCH"] = args.pch if args.compile_only else os.environ.get("KFORGE_CUDA_PCH", "on")
    if args.compile_only:  # no GPU to ask: the units are compiled for sm_90a, as on an H100
        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0a")
    from device_label import device_label  # a sibling in bench/

    label = device_label()
    if label == "cpu" and not args.compile_only:
        sys.exit("no CUDA GPU here: --compile-only compiles the units without one")
    if args.compile_only and label != "cpu":
        label += "-compile-only"
    result = {
        "mode": "compile-only" if args.compile_only else "verify",
        "label": label,
        "command": "python bench/cuda_fast_build.py " + " ".join(sys.argv[1:]),
        "when": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start",
        "pch": args.pch if args.compile_only else "as shipped (prewarmed at the probe)",
        "nvcc_steps": os.environ.get("KFORGE_CUDA_NVCC_STEPS", "side-by-side"),
        "server": None if args.compile_only else args.server,
        "sources": {},
    }
    server = None
    if args.server == "warm" and not args.compile_only:
        server, result["warm_up"] = warm_server(args.baselines.split(","))
    for entry in corpus:
        name = entry["candidate"].removesuffix(".py")
        missing = missing_headers(entry)
        if missing:
            result["sources"][name] = {"skipped": f"this CUDA toolkit lacks {', '.join(missing)}"}
            progress(f"{name}: skipped, the toolkit lacks {', '.join(missing)}")
            continue
        progress(f"{name}: start")
        if args.compile_only:
            result["sources"][name] = cpu_source(entry, args.pch == "on")
        else:
            result["sources"][name] = gpu_source(entry, args.baselines.split(","), server)
    if server is not None:
        server.close()
    result["machine"] += f", {os.getloadavg()[0]:.1f} at the end; {time.perf_counter() - STARTED:.0f} s in all"
    text = markdown(result)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, separators=(",", ":")) + "\n")
        args.out.with_suffix(".md").write_text(text)


if __name__ == "__main__":
    main()
