"""kforge-mcp: turn a PyTorch reference into a faster kernel, with tools an agent can call.

The headless API (the same engine the MCP server and the ``kforge`` CLI use)::

    import kforge_mcp
    kforge_mcp.list_targets()
    kforge_mcp.compile("triton", "candidate.py", arch="sm_90a")
    kforge_mcp.verify("problem.py", "candidate.py", target="triton")

Each call runs candidate code in a warm worker process, never in the caller's.
"""

from __future__ import annotations

import importlib.metadata

try:  # written once, in pyproject.toml
    __version__ = importlib.metadata.version("kforge-mcp")
except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
    __version__ = "0+unknown"

__all__ = [
    "Engine",
    "analyze_profile",
    "compile",
    "list_targets",
    "profile",
    "run_bench",
    "run_loop",
    "verify",
    "write_report",
    "__version__",
]


def __getattr__(name):  # keep `import kforge_mcp` cheap: no torch, no SDK until asked
    if name == "Engine":
        from kforge_mcp.api import Engine

        return Engine
    raise AttributeError(name)


def list_targets(refresh: bool = False):
    """Every target with whether it works here, why not, devices and toolchain versions."""
    from kforge_mcp.api import default_engine

    return default_engine().list_targets(refresh=refresh)


def compile(target: str, source: str, arch: str | None = None, problem: str | None = None, **kwargs):
    """Compile a candidate without running it: diagnostics and per-kernel resources."""
    from kforge_mcp.api import default_engine

    return default_engine().compile(target, source, arch=arch, problem=problem, **kwargs)


def verify(problem: str, candidate: str, target: str = "triton", **kwargs):
    """Check a candidate against its reference and time both: a VerifyReport."""
    from kforge_mcp.api import default_engine

    return default_engine().verify(problem, candidate, target=target, **kwargs)


def profile(problem: str, candidate: str | None = None, target: str = "triton", **kwargs):
    """Profile a candidate (the reference when candidate is None): kernels, launches, roofline."""
    from kforge_mcp.api import default_engine

    return default_engine().profile(problem, candidate, target=target, **kwargs)


def analyze_profile(
    profile=None, path: str | None = None, image: str | None = None, problem: str | None = None, **kwargs
):
    """Ranked recommendations from a ProfileReport (or its dict), a captured profiler file, or a screenshot."""
    from kforge_mcp.api import default_engine

    if profile is not None and hasattr(profile, "model_dump"):
        profile = profile.model_dump()
    return default_engine().analyze_profile(profile=profile, path=path, image=image, problem=problem, **kwargs)


def run_bench(
    problems: str, candidates: str | None = None, target: str = "triton", out: str = "kforge-bench", **kwargs
):
    """Judge a suite (KernelBench layout: ``candidates/<problem stem>/*.py``) and score it: results.jsonl,
    summary.json (correctness, geomean speedup, fast_p), bench.png and bench.html under ``out``. A BenchSummary.
    ``generate=callable`` or ``provider=...`` runs the loop per problem instead; a rerun skips what is done."""
    from kforge_mcp.suite import run_bench as _run_bench

    return _run_bench(problems, candidates, target, out, **kwargs)


def run_loop(
    problem: str,
    target: str = "triton",
    generate=None,
    provider: str | None = None,
    max_iterations: int | None = None,
    **kwargs,
):
    """The whole KForge loop headless: ``generate(prompt) -> reply`` (or provider='anthropic'|'openai')
    writes candidates; repaired until correct, then optimized from profiles. A LoopResult (run_id, best, attempts,
    report). ``run_id=...`` resumes a stopped or interrupted run from its last attempt. max_iterations: default 8."""
    from kforge_mcp.agents.loop import run_loop as _run_loop
    from kforge_mcp.api import default_engine

    engine = kwargs.pop("engine", None) or default_engine()
    if generate is None and provider is not None:  # the provider's key and model as the environment holds them now
        from kforge_mcp.agents.providers import make_provider
        from kforge_mcp.engine.parts import read_settings

        generate = make_provider(provider, settings=read_settings())
    return _run_loop(
        problem, target, generate, engine=engine, provider=provider, max_iterations=max_iterations, **kwargs
    )


def write_report(run_id: str, out: str | None = None, home: str | None = None):
    """Draw a loop run: an HTML page (plot, attempts, best kernel) and a PNG, in ``out`` (default
    <KFORGE_HOME>/reports/<run_id>/). Returns their paths (ReportFiles)."""
    from kforge_mcp.agents.report import write_report as _write
    from kforge_mcp.engine.parts import read_settings
    from kforge_mcp.store import RunStore

    return _write(RunStore.for_home(home or read_settings().home), run_id, out)
