"""The CUDA corpus (tests/cuda_sources/): candidates as people write them, each built on the split path
its units compiled by the real nvcc and g++ with torch's headers (no GPU: nothing is linked or run),
and each with a broken twin that `compile` and the real host build both reject.

The GPU side (verify of each, cold, after a kernel edit, again): bench/cuda_fast_build.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from kforge_mcp.core.problem import Source
from kforge_mcp.core.settings import Settings
from kforge_mcp.targets.cuda.build import capture_builds
from kforge_mcp.targets.cuda.split import split
from kforge_mcp.targets.cuda.target import LOAD_INLINE_CUDA_PREFIX
from kforge_mcp.targets.source_map import map_pieces

ROOT = Path(__file__).resolve().parents[1]
CORPUS_DIR = ROOT / "tests/cuda_sources"
CORPUS = json.loads((CORPUS_DIR / "corpus.json").read_text())["sources"]
IDS = [e["candidate"].removesuffix(".py") for e in CORPUS]
# Each twin pays the stock build its split host unit falls back to (30 s and more on 2 cores): CI breaks two sources,
# one with each kind of break (a KernelBench example with a wrong type, a template dispatch with an undeclared
# name); KFORGE_TEST_ALL_TWINS=1 breaks every source.
TWINS = IDS if os.environ.get("KFORGE_TEST_ALL_TWINS") else ["kernelbench_fuse_gelu", "dispatch_floating_vectorized"]
needs_nvcc = pytest.mark.skipif(
    shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(), reason="needs nvcc"
)


def candidate(entry: dict) -> Source:
    path = CORPUS_DIR / entry["candidate"]
    return Source(text=path.read_text(), name=str(path))


def missing_toolkit_headers(entry: dict) -> list[str]:
    from kforge_mcp.targets.nvidia import find_tool

    nvcc = find_tool("nvcc")
    include = Path(nvcc).resolve().parents[1] / "include" if nvcc else None
    return [h for h in entry.get("toolkit_headers", []) if include is None or not (include / h).exists()]


def broken_twin(entry: dict, index: int) -> tuple[str, str, str]:
    """(kind, the twin's text, the line it breaks): an undeclared name in host code, or a wrong type there,
    at the host function's last ``return x;``."""
    text = candidate(entry).text
    returns = list(re.finditer(r"^([ \t]*)return (\w+);$", text, re.M))
    assert returns, entry["candidate"]
    m = returns[-1]
    kind = ("undeclared", "wrong_type")[index % 2]
    broken = (
        f"{m.group(1)}return {m.group(2)}_typo;"
        if kind == "undeclared"
        else f"{m.group(1)}return {m.group(2)}.numel();"
    )
    return kind, text[: m.start()] + broken + text[m.end() :], text[: m.start()].count("\n") + 1


@pytest.mark.parametrize("entry", CORPUS, ids=IDS)
def test_every_source_splits_with_its_lines_and_template_kernels(entry, tmp_path):
    source = candidate(entry)
    _, builds = capture_builds(source, tmp_path)
    assert builds and all(b.cuda for b in builds)
    for b in builds:
        code = LOAD_INLINE_CUDA_PREFIX + "\n".join(
            p.annotated(source.name) for p in map_pieces(b.cuda, source.text, "cuda_sources")
        )
        units = split(code)
        assert units.host.count("\n") == units.device.count("\n") == code.count("\n")
        assert units.templates == entry["templates"] and units.kernels
        assert "<<<" not in units.host and "__global__" not in units.host


@pytest.fixture(scope="module")
def extension_cache():
    """One extension cache for the module, its lean headers precompiled first (as a GPU machine's server
    does at its probe), so each source pays for its own code."""
    from kforge_mcp.targets.cuda.build_plan import plan_build, toolchain_id
    from kforge_mcp.targets.cuda.fast_build import pchs_for
    from kforge_mcp.targets.cuda.preludes import PREWARMED

    root = Path(tempfile.mkdtemp(prefix="kforge-corpus-ext-"))
    saved = {k: os.environ.get(k) for k in ("TORCH_EXTENSIONS_DIR", "KFORGE_CUDA_PCH", "TORCH_CUDA_ARCH_LIST")}
    os.environ.update(TORCH_EXTENSIONS_DIR=str(root), KFORGE_CUDA_PCH="on", TORCH_CUDA_ARCH_LIST="9.0a")
    try:
        import torch.utils.cpp_extension as ce

        from kforge_mcp.targets.cuda.build import extension_cache_dir

        plan = plan_build(ce.load_inline, "kforge_pch_plan", "", "__global__ void k() {}", [], {}, root / "plan")
        pchs = pchs_for(plan, extension_cache_dir(), toolchain_id(plan), PREWARMED)
        for pch in pchs.values():
            pch.start_build()
        deadline = time.monotonic() + 900
        while not all(p.ready for p in pchs.values()) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert all(p.ready for p in pchs.values())
        yield root
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(root, ignore_errors=True)


def real_build(source: Source, workdir: Path):
    """The split build as verify runs it on a GPU machine, its units compiled and not linked."""
    from kforge_mcp.targets.cuda.load import load_candidate

    builds: list = []
    workdir.mkdir()
    load_candidate(source, (9, 0), workdir, builds, Settings.read(), prebuild=True, link=False)
    return builds


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("entry", CORPUS, ids=IDS)
def test_every_source_builds_on_the_split_path_and_compile_accepts_it(entry, extension_cache, tmp_path):
    from kforge_mcp.targets.cuda.target import CudaTarget

    missing = missing_toolkit_headers(entry)
    if missing:
        pytest.skip(f"this CUDA toolkit lacks {', '.join(missing)}: no build of this source (stock or split) here")
    builds = real_build(candidate(entry), tmp_path / "build")
    assert [(b.path, b.fallback) for b in builds] == [("split", None)]
    # (the device unit's host object may be one another source's kernels left: it is part of "device")
    assert set(builds[0].compiled) | set(builds[0].reused) - {"device host object"} == {"main", "host", "device"}
    if "device" in builds[0].compiled:  # nvcc's steps as shipped: the host and device sides at once
        assert builds[0].nvcc_steps == "side-by-side"
    (tmp_path / "compile").mkdir()
    report = CudaTarget(Settings.read()).compile(candidate(entry), "sm_90", None, tmp_path / "compile")
    assert report.ok, [d.message for d in report.diagnostics if d.severity == "error"]
    assert report.kernels  # the lean compile measured the kernels


@needs_nvcc
@pytest.mark.slow
def test_the_same_text_under_another_name_shares_its_build(extension_cache, tmp_path):
    """An agent's copy of a source, or the same file at a new path: one extension, built once (the name is only
    in the #line directives, which the build shares under one name)."""
    from kforge_mcp.targets.cuda.build import extension_cache_dir

    entry = next(e for e in CORPUS if e["candidate"] == "kernelbench_add.py")
    text = (CORPUS_DIR / entry["candidate"]).read_text()
    real_build(Source(text=text, name="first_try.py"), tmp_path / "a")
    again = real_build(Source(text=text, name=str(tmp_path / "copies" / "second_try.py")), tmp_path / "b")
    assert again[0].compiled == {} and set(again[0].reused) == {"main", "host", "device"}, again
    built = [d for d in extension_cache_dir().iterdir() if d.is_dir() and d.name.startswith("elementwise_add-")]
    assert len(built) == 1, built


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("entry", [e for e in CORPUS if e["candidate"].removesuffix(".py") in TWINS], ids=TWINS)
def test_compile_rejects_the_broken_twin_as_the_real_host_build_does(entry, extension_cache, tmp_path):
    from kforge_mcp.targets.cuda.target import CudaTarget

    if missing_toolkit_headers(entry):
        pytest.skip("this CUDA toolkit lacks the headers this source includes")
    kind, text, line = broken_twin(entry, CORPUS.index(entry))
    twin = Source(text=text, name=str(CORPUS_DIR / f"twin_{entry['candidate']}"))
    builds = real_build(twin, tmp_path / "build")
    assert [b.path for b in builds] == ["stock"] and "the split host unit failed" in builds[0].fallback, kind
    (tmp_path / "compile").mkdir()
    report = CudaTarget(Settings.read()).compile(twin, "sm_90", None, tmp_path / "compile")
    errors = [d for d in report.diagnostics if d.severity == "error"]
    assert not report.ok and errors, kind
    assert any(d.line == line for d in errors), (kind, line, [(d.line, d.message) for d in errors])
