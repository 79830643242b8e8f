"""cuda and cute targets on an NVIDIA GPU (skipped elsewhere): the real load_inline build,
its cache and lock, CuTe DSL kernels run, compile defaults to the device arch.
Run there with: pytest tests/test_gpu_nvidia.py -q"""

from __future__ import annotations

import importlib.util
import json
import shutil
import threading
import time
from pathlib import Path

import pytest
from conftest import example, problem

from kforge_mcp.api import Engine
from kforge_mcp.core.requests import Done, WarmUpRequest
from kforge_mcp.core.settings import Settings

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")]
needs_cute = pytest.mark.skipif(importlib.util.find_spec("cutlass") is None, reason="needs nvidia-cutlass-dsl")
EXAMPLES = ["fused_bias_gelu", "row_softmax", "gemm_bias_relu"]


def test_targets_are_available_on_the_gpu(engine):
    targets = {t.name: t for t in engine.list_targets().targets}
    assert targets["cuda"].available and "cuda:0" in targets["cuda"].devices, targets["cuda"]
    if importlib.util.find_spec("cutlass") is not None:
        assert targets["cute"].available, targets["cute"]


@pytest.mark.parametrize("name", EXAMPLES)
def test_cuda_examples_pass(engine, name):
    report = engine.verify(problem(name), example(name, "cuda"), target="cuda", timeout_s=900)
    assert report.verdict == "pass", (report.errors, report.mismatches, report.diagnostics)
    assert report.execution == "cuda" and "events" in report.timing.candidate.clock


def test_cuda_build_is_cached_across_verifies(engine):
    engine.verify(
        problem("row_softmax"), example("row_softmax", "cuda"), target="cuda", baselines=["eager"], timeout_s=900
    )
    started = time.perf_counter()
    report = engine.verify(problem("row_softmax"), example("row_softmax", "cuda"), target="cuda", baselines=["eager"])
    assert report.verdict == "pass" and time.perf_counter() - started < 30


def test_cuda_build_error_maps_to_the_python_line(engine):
    src = open(example("row_softmax", "cuda")).read().replace("m = warp_max(m);", "m = warp_max(m) + not_declared;")
    report = engine.verify(problem("row_softmax"), src, target="cuda", baselines=["eager"], timeout_s=900)
    assert report.verdict == "error"
    line = src.splitlines().index(next(t for t in src.splitlines() if "not_declared" in t)) + 1
    assert any(d.line == line and "not_declared" in d.message for d in report.diagnostics), report.diagnostics


def test_two_engines_building_the_same_source_at_once(tmp_path):
    """Two pools (two worker processes) build one new source into one cache: the lock keeps it whole."""
    src = (
        open(example("fused_bias_gelu", "cuda")).read().replace('name="bias_gelu_scale"', 'name="bias_gelu_scale_race"')
    )
    engines = [Engine(home=tmp_path / "home"), Engine(home=tmp_path / "home")]
    reports = [None, None]

    def run(i):
        reports[i] = engines[i].verify(
            problem("fused_bias_gelu"), src, target="cuda", baselines=["eager"], timeout_s=900
        )

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for e in engines:
            e.close()
    assert [r.verdict for r in reports] == ["pass", "pass"], [r.errors for r in reports]


def test_cuda_compile_defaults_to_the_device_arch(engine):
    report = engine.compile("cuda", example("gemm_bias_relu", "cuda"))
    major, minor = torch.cuda.get_device_capability(0)
    assert report.ok and report.arch == f"sm_{major}{minor}{'a' if major >= 9 else ''}"
    assert report.kernels[0].registers > 0


@needs_cute
@pytest.mark.parametrize("name", EXAMPLES)
def test_cute_examples_pass(engine, name):
    report = engine.verify(problem(name), example(name, "cute"), target="cute", timeout_s=900)
    assert report.verdict == "pass", (report.errors, report.mismatches, report.diagnostics)


@needs_cute
def test_cute_compile_on_the_gpu_host(engine):
    report = engine.compile("cute", example("row_softmax", "cute"), problem=problem("row_softmax"))
    assert report.ok and report.kernels[0].registers > 0


def cuda_build(report) -> dict:
    return next(f.evidence for f in report.findings if f.code == "cuda_build")


def test_split_build_reuses_what_an_edit_left_unchanged(engine):
    src = open(example("fused_bias_gelu", "cuda")).read()
    first = engine.verify(problem("fused_bias_gelu"), src, target="cuda", baselines=["eager"], timeout_s=900)
    assert first.verdict == "pass" and cuda_build(first)["path"] == "split", first.findings
    kernel_edit = src.replace("0.5f * v * (1.0f", "0.5f * v * (1.00f")
    started = time.perf_counter()
    edited = engine.verify(problem("fused_bias_gelu"), kernel_edit, target="cuda", baselines=["eager"])
    assert edited.verdict == "pass", edited.errors
    built = cuda_build(edited).get("first_build") or cuda_build(edited)  # built ahead on a CPU worker, or here
    assert set(built["reused"]) == {"main", "host", "host library", "device host object"}, cuda_build(edited)
    assert time.perf_counter() - started < 30


def test_split_and_stock_builds_give_the_same_outputs(tmp_path, monkeypatch):
    from kforge_mcp.core.problem import Source, build_models, load_problem
    from kforge_mcp.targets.cuda.target import CudaTarget

    src = Source(text=open(example("row_softmax", "cuda")).read(), name="cand.py")
    prob = load_problem(Source(text=open(problem("row_softmax")).read(), name="p.py"), tmp_path)
    outs = {}
    for mode in ("split", "stock"):
        monkeypatch.setenv("KFORGE_CUDA_BUILD", mode)
        monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / mode))
        target = CudaTarget(Settings.read())  # after the variables above: the build mode is a setting
        (tmp_path / f"w-{mode}").mkdir()
        loaded = target.load(src, "cuda", tmp_path / f"w-{mode}")
        assert cuda_build_path(loaded) == mode
        module = loaded.module
        _, cand = build_models(prob, module, "cuda")
        with torch.no_grad():
            outs[mode] = cand(*prob.make_inputs(0, "cuda"))
    assert torch.equal(outs["split"], outs["stock"])


def test_two_versions_of_a_kernel_loaded_in_one_process_each_run_their_own(tmp_path, monkeypatch):
    """A kernel edit keeps the extension's module name and its host code, which the split build links
    apart from the kernels: the second version, loaded where the first already is (a warm worker), runs
    its own kernel, and its build linked only the kernels and compiled no host code."""
    from kforge_mcp.core.problem import Source, build_models, load_problem
    from kforge_mcp.targets.cuda.target import CudaTarget

    text = open(example("fused_bias_gelu", "cuda")).read()
    prob = load_problem(Source(text=open(problem("fused_bias_gelu")).read(), name="p.py"), tmp_path)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    target = CudaTarget(Settings.read())
    outs, builds = [], []
    for i, src in enumerate((text, text.replace("0.5f * v * (1.0f", "0.25f * v * (1.0f"))):
        (tmp_path / f"w{i}").mkdir()
        loaded = target.load(Source(text=src, name="cand.py"), "cuda", tmp_path / f"w{i}")
        builds.append(next(f.evidence for f in loaded.findings if f.code == "cuda_build"))
        _, cand = build_models(prob, loaded.module, "cuda")
        with torch.no_grad():
            outs.append(cand(*prob.make_inputs(0, "cuda")))
    assert [b["path"] for b in builds] == ["split", "split"], builds
    assert "host library" in builds[1]["reused"] and list(builds[1]["linked"]) == ["kernels"], builds[1]
    # the kernels' host object kept from the first build, the second version's fatbinary put in it
    assert "device host object" in builds[1]["reused"], builds[1]
    torch.testing.assert_close(outs[1] * 2, outs[0])  # half the first version's output: its own kernel


def cuda_build_path(loaded) -> str:
    return next(f.evidence["path"] for f in loaded.findings if f.code == "cuda_build")


def test_batch_builds_ahead_on_cpu_workers(tmp_path):
    from kforge_mcp.runtime.executor import LocalExecutor
    from kforge_mcp.runtime.pool import WorkerPool

    src = open(example("fused_bias_gelu", "cuda")).read()
    items = [
        {"problem": problem("fused_bias_gelu"), "candidate": src.replace("threads = 256", f"threads = {t}")}
        for t in (64, 128, 512)
    ]
    messages: list[str] = []
    engine = Engine(
        home=tmp_path, executor=LocalExecutor(WorkerPool(tmp_path, settings=Settings.read()), cpu_workers=2)
    )
    try:
        reports = engine.verify_batch(items, on_progress=messages.append, target="cuda", baselines=["eager"])
    finally:
        engine.close()
    assert [r.verdict for r in reports] == ["pass"] * 3, [r.errors for r in reports]
    assert sum("built on a CPU worker" in m for m in messages) == 3, messages
    # each verify loads what a CPU worker built ahead (the messages say how each prebuild went)
    assert all(cuda_build(r)["reused"] == ["extension"] for r in reports), (messages, [cuda_build(r) for r in reports])


def test_a_source_built_ahead_once_is_not_built_ahead_again(tmp_path):
    """The same CUDA source verified again on one server: its extension is in the build cache, so the second
    verify starts no CPU worker's head start (which would only hold the build's lock while the GPU loads it)."""
    engine = Engine(home=tmp_path)
    src = open(example("fused_bias_gelu", "cuda")).read().replace("threads = 256", "threads = 128")
    try:
        said: list[list[str]] = [[], []]
        reports = [
            engine.verify(problem("fused_bias_gelu"), src, target="cuda", on_progress=said[i].append) for i in (0, 1)
        ]
    finally:
        engine.close()
    assert [r.verdict for r in reports] == ["pass", "pass"], [r.errors for r in reports]
    assert not any("built on a CPU worker" in m for m in said[1]), said[1]
    assert cuda_build(reports[1])["reused"] == ["extension"], cuda_build(reports[1])


def test_the_gpu_warm_up_leaves_a_worker_whose_compiled_baseline_still_judges(tmp_path):
    """The server's warm-up job (torch.compile on a tiny function of its own) runs on the GPU lane, and the
    verify after it compiles and times the problem's own reference as its compiled baseline."""
    engine = Engine(home=tmp_path)
    try:
        reply = engine.executor.run("cuda:0", WarmUpRequest(device="cuda:0"), timeout_s=300)
        assert isinstance(reply, Done) and reply.value["seconds"] > 0, reply
        report = engine.verify(problem("fused_bias_gelu"), example("fused_bias_gelu", "triton"), target="triton")
        assert report.verdict == "pass" and report.timing.compiled is not None, report.findings
        assert not [f for f in report.findings if f.code == "compiled_baseline_unavailable"]
    finally:
        engine.close()


CHEATS = Path(__file__).resolve().parent / "cheats"


def test_a_candidate_that_pins_l2_is_suspicious_and_changes_nothing_for_the_ones_after_it(tmp_path):
    """The L2-pinning cheat raises the persisting-L2 limit and sets an access policy window on every call. Its
    honest twin, verified alone and in one batch with it in both orders, keeps its verdict, time and speedup;
    the baselines agree across all; the cheat is suspicious, naming the persisting L2."""
    prob, pin, honest = (str(CHEATS / f"{n}.py") for n in ("row_sum_problem", "pin_l2", "pin_l2_honest"))
    engine = Engine(home=tmp_path)
    common = {"target": "cuda", "timeout_s": 900}
    try:
        alone = engine.verify(prob, honest, **common)
        order = [pin, honest, honest, pin]  # the twin after the cheat, after itself; the cheat after the twin
        batch = engine.verify_batch([{"problem": prob, "candidate": c} for c in order], **common)
    finally:
        engine.close()
    reports = [alone, *batch]
    print(json.dumps([summary(c, r) for c, r in zip([honest, *order], reports)], indent=1))
    for r in (batch[0], batch[3]):
        state = next(f for f in r.findings if f.code == "device_state_changed")
        assert r.verdict == "suspicious" and state.severity == "suspicious", r.findings
        assert "persisting_l2_limit" in state.evidence["moves_timings"] and "persisting-L2" in state.message
        assert state.evidence["unrestored"] == []
    for r in (alone, batch[1], batch[2]):
        assert r.verdict == "pass", (r.errors, r.mismatches, r.findings)
        assert not [f for f in r.findings if f.code == "device_state_changed"], r.findings
        ratio = r.timing.candidate.median_ms / alone.timing.candidate.median_ms
        assert abs(ratio - 1) <= SAME_WITHIN, ("candidate time", ratio)
        assert abs(r.speedup / alone.speedup - 1) <= SAME_WITHIN, ("speedup", r.speedup, alone.speedup)
    for name in ("eager", "compiled"):
        ms = [getattr(r.timing, name).median_ms for r in reports]
        assert max(ms) / min(ms) - 1 <= SAME_WITHIN, (name, ms)


# The twin's figures must agree within this: their run-to-run spread is well under it, and what the cheat
# left in place, without the put-back, moved them by more (docs/performance.md, Verdicts).
SAME_WITHIN = 0.10


def summary(candidate: str, r) -> dict:
    t = r.timing
    return {
        "candidate": Path(candidate).stem,
        "verdict": r.verdict,
        "candidate_ms": t.candidate.median_ms if t else None,
        "eager_ms": t.eager.median_ms if t and t.eager else None,
        "compiled_ms": t.compiled.median_ms if t and t.compiled else None,
        "speedup": r.speedup,
        "speedup_ci": r.speedup_ci,
        "findings": {f.code: f.severity for f in r.findings},
        "device_state_changed": next((f.evidence for f in r.findings if f.code == "device_state_changed"), None),
    }


def test_an_exact_fp32_convolution_passes_against_the_fp32_reference(engine):
    """torch runs the reference's ConvTranspose3d through cuDNN in TF32 by default, and BatchNorm magnifies that
    rounding past 1e-4: the reference that judges runs with TF32 off, so the exact kernel passes, and the
    finding says how far torch's defaults would have moved the reference."""
    tests = Path(__file__).resolve().parent
    report = engine.verify(
        str(tests / "problems" / "conv_transpose3d_bn_subtract.py"),
        str(tests / "candidates" / "conv_transpose3d_bn_subtract.py"),
        target="triton",
        timeout_s=900,
    )
    assert report.verdict == "pass", (report.mismatches, report.errors, report.findings)
    assert report.precision == "fp32" and report.atol == 1e-4
    assert "conv ieee" in report.reference_math and "conv tf32" in report.baseline_math
    moved = next(f for f in report.findings if f.code == "reference_moved_by_default_math")
    assert moved.evidence["error_fraction_of_tolerance"] > 1, moved


@pytest.mark.skipif(shutil.which("ncu") is None, reason="needs Nsight Compute (ncu) on PATH")
def test_a_second_metrics_profile_takes_the_profiler_launched_ahead(tmp_path):
    """The first profile at depth 'metrics' launches ncu's program itself and leaves one waiting; the next, of
    another kernel, hands that one its spec: both carry ncu's metrics, and the second's program was ready sooner
    (its Python, torch, the profiler's injection and the device's context already loaded). An engine of its own:
    on the session's, a verify before it has launched the first profile's program already."""
    engine, reports = Engine(home=tmp_path / "home"), []
    try:
        for name in ("triton_naive", "triton"):
            reports.append(
                engine.profile(problem("row_softmax"), example("row_softmax", name), target="triton", depth="metrics")
            )
            time.sleep(15)  # an agent's turn: the spare imports and makes its context meanwhile
    finally:
        engine.close()
    for r in reports:
        assert r.source == "torch.profiler+ncu" and any(k.issue_active_pct for k in r.device_kernels()), r.notes
    first, second = (r.phases["metrics_profiler_ready"] for r in reports)
    assert second < first / 2, (first, second)
