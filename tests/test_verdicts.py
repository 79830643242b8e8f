"""Verdicts you can bet a reward on: timing a memo cannot fool, a seed per call, a
precision policy stated in every report, CPU verdicts that see GPU rounding, no runtime thread
blamed on the candidate, module state compared, and guards whose tests could fail."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import CANDIDATES, ROOT, example, problem
from mcp import Client

from kforge_mcp.core.errors import InputError
from kforge_mcp.judge.thread_watch import ThreadWatch
from kforge_mcp.targets.triton.precision import emulated_product, tf32

CHEATS = Path(__file__).resolve().parent / "cheats"
PROBLEM = str(CHEATS / "problem.py")
GEMM = problem("gemm_bias_relu")
FAST = {"target": "triton", "trials": 2, "baselines": ["eager"], "timing_budget_s": 0.1}


def verify(engine, candidate: str, prob: str = PROBLEM, **kwargs):
    return engine.verify(prob, str(CHEATS / f"{candidate}.py"), **{**FAST, **kwargs})


def codes(report) -> set[str]:
    return {f.code for f in report.findings}


# ---- timing a memo cannot fool ----


def test_a_memo_keyed_on_the_address_replays_a_stale_output_and_fails(engine):
    report = verify(engine, "memo_pointer", trials=3)
    assert report.verdict == "fail", (report.findings, report.mismatches)
    assert "wrong_during_timing" in codes(report)
    assert report.mismatches[0].reason.startswith("a timed call")


def test_a_run_that_differs_from_the_one_before_is_set_against_the_reference(engine):
    """Two runs on the same inputs differ: the verdict says which was wrong, the second run against the
    reference, as a mismatch of its own beside the nondeterministic finding."""
    report = verify(engine, "wrong_when_asked_again", trials=2)
    assert report.verdict == "fail" and "nondeterministic" in codes(report), (report.findings, report.mismatches)
    assert [m.reason.split(":")[0] for m in report.mismatches] == ["the determinism check's second run"]
    # noise within the tolerance differs from itself but not from the reference: no mismatch is made up
    noisy = verify(engine, "nondeterministic")
    assert "nondeterministic" in codes(noisy) and not noisy.mismatches


def test_a_memo_keyed_on_a_fingerprint_gets_no_hit_while_timed(engine):
    """Fed one input over and over, the memo answered from its dictionary and looked thousands of
    times faster than the honest kernel; with fresh inputs for every timed call it computes each
    one, so its time is the honest kernel's (the interpreter makes the gap four orders of magnitude)."""
    honest = verify(engine, "honest")
    memo = verify(engine, "memo_fingerprint")
    assert memo.verdict == "pass" and honest.verdict == "pass"
    # the candidates' own times, not speedups: the eager baseline of a 20 us op moved 400x between two
    # verifies on an oversubscribed 2-core CI machine (torch's thread pool waiting on the scheduler)
    memo_ms, honest_ms = memo.timing.candidate.median_ms, honest.timing.candidate.median_ms
    assert memo_ms > honest_ms / 20, (memo_ms, honest_ms)


def test_returning_after_a_few_calls_is_caught_on_a_timed_call(engine):
    report = verify(engine, "wrong_after_timing")
    assert report.verdict == "fail" and "wrong_during_timing" in codes(report)


# ---- a seed per call ----


def test_each_call_has_a_fresh_seed_and_a_seed_reproduces_it(engine):
    args = dict(target="triton", trials=1, baselines=["eager"], timing_budget_s=0.1)
    wrong = (problem("fused_bias_gelu"), example("fused_bias_gelu", "triton_wrong"))
    first, second = engine.verify(*wrong, **args), engine.verify(*wrong, **args)
    assert first.verdict == second.verdict == "fail"
    assert first.seed is not None and second.seed is not None and first.seed != second.seed
    assert first.mismatches[0].model_dump() != second.mismatches[0].model_dump()  # other inputs, other weights
    again = engine.verify(*wrong, seed=first.seed, **args)
    assert again.seed == first.seed
    assert again.mismatches[0].model_dump() == first.mismatches[0].model_dump()


# ---- precision policy ----


def test_every_report_states_what_judged_it(engine):
    report = verify(engine, "honest")
    assert (report.precision, report.atol, report.rtol) == ("fp32", 1e-4, 1e-4)
    loose = verify(engine, "honest", atol=1e-3)
    assert (loose.precision, loose.atol, loose.rtol) == ("fp32", 1e-3, 1e-4)


def test_a_problem_declares_its_precision_and_tolerance(engine, tmp_path):
    prob = tmp_path / "half_softmax.py"
    prob.write_text(Path(PROBLEM).read_text() + '\nPRECISION = "fp16"\nATOL = 0.02\n')
    report = verify(engine, "honest", prob=str(prob))
    assert report.verdict == "pass", (report.mismatches, report.errors)
    assert (report.precision, report.atol, report.rtol) == ("fp16", 0.02, 1e-2)
    asked = verify(engine, "honest", prob=str(prob), precision="fp32")  # the request wins
    assert (asked.precision, asked.atol) == ("fp32", 1e-4)


@pytest.mark.parametrize(
    ("args", "declared", "expected"),
    [
        ({"precision": "fp8"}, "", "precision must be 'fp32', 'tf32', 'bf16' or 'fp16', got 'fp8'"),
        ({"atol": -1.0}, "", "atol must be >= 0"),
        ({"seed": -3}, "", "seed must be an integer"),
        ({}, 'PRECISION = "int4"\n', "PRECISION: precision 'int4' is not one of"),
        ({}, "RTOL = -0.5\n", "RTOL: rtol must be >= 0"),
        ({}, 'ATOL = "big"\n', "ATOL: atol must be a number"),
    ],
)
def test_bad_precision_input_names_the_field(engine, tmp_path, args, declared, expected):
    prob = tmp_path / "declared.py"
    prob.write_text(Path(PROBLEM).read_text() + "\n" + declared)
    with pytest.raises(InputError, match=expected.replace("(", r"\(")):
        verify(engine, "honest", prob=str(prob), **args)


@pytest.mark.anyio
async def test_the_verify_tool_takes_precision_and_seed(server):
    async with Client(server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        props = tools["verify"].input_schema["properties"]
        assert "seed" in props and "precision" in props
        assert "fp8" not in str(props["precision"]) and "tf32" in str(props["precision"])
        bad = await client.call_tool(
            "verify",
            {"problem": PROBLEM, "candidate": str(CHEATS / "honest.py"), "target": "triton", "precision": "fp8"},
        )
        assert bad.is_error and "precision" in bad.content[0].text
        good = await client.call_tool(
            "verify",
            {"problem": PROBLEM, "candidate": str(CHEATS / "honest.py"), "wait_s": 600, "seed": 11, **FAST},
        )
        assert not good.is_error and good.structured_content["seed"] == 11


# ---- CPU verdicts that see the GPU's rounding ----


def test_tf32_rounding_is_the_tensor_cores():
    x = np.array([1 + 2**-11, 1 + 2**-10 + 2**-11, -(1 + 2**-11 + 2**-12), np.inf, np.nan], dtype=np.float32)
    assert tf32(x, "truncate")[:3].tolist() == [1.0, 1 + 2**-10, -1.0]
    assert tf32(x, "nearest")[:3].tolist() == [1 + 2**-10, 1 + 2**-9, -(1 + 2**-10)]
    assert np.isinf(tf32(x)[3]) and np.isnan(tf32(x)[4])
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((32, 256), dtype=np.float32), rng.standard_normal((256, 32), dtype=np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    err = {p: np.abs(emulated_product(a, b, p) - exact).max() for p in ("IEEE", "TF32", "TF32x3")}
    assert err["TF32"] > 1e-3 > 1e-4 > err["TF32x3"] and err["IEEE"] < 1e-4


def test_a_tf32_gemm_fails_at_fp32_on_the_cpu_as_on_the_gpu(engine):
    report = engine.verify(GEMM, example("gemm_bias_relu", "triton_tf32"), **FAST)
    assert report.verdict == "fail" and report.precision == "fp32"
    if report.execution == "triton-interpreter":
        assert "dot_precision_emulated" in codes(report)
    assert report.mismatches[0].max_abs_error > 1e-4


@pytest.mark.slow
def test_a_tf32_gemm_passes_at_tf32_and_a_bf16_gemm_at_bf16(engine):
    tf = engine.verify(GEMM, example("gemm_bias_relu", "triton_tf32"), precision="tf32", **FAST)
    assert tf.verdict == "pass" and (tf.precision, tf.atol) == ("tf32", 5e-3), (tf.mismatches, tf.findings)
    bf = engine.verify(GEMM, example("gemm_bias_relu", "triton_bf16"), precision="bf16", **FAST)
    assert bf.verdict == "pass" and bf.precision == "bf16", (bf.mismatches, bf.findings)


def test_a_bf16x3_gemm_passes_at_fp32_and_a_bf16_gemm_fails_by_its_rounding(engine):
    """The interpreter keeps bf16 as bit patterns: unless its dot is given values, a bf16x3 kernel fails
    with errors near 1e10, and a single bf16 pass fails by as much instead of by bf16's rounding."""
    split = engine.verify(GEMM, example("gemm_bias_relu", "triton_bf16x3"), **FAST)
    assert split.verdict == "pass" and (split.precision, split.atol) == ("fp32", 1e-4), (
        split.mismatches,
        split.findings,
    )
    single = engine.verify(GEMM, example("gemm_bias_relu", "triton_bf16"), **FAST)
    assert single.verdict == "fail" and 1e-4 < single.mismatches[0].max_abs_error < 0.05, single.mismatches


def test_a_bf16_kernel_with_its_epilogue_in_bf16_passes_at_bf16(engine):
    gemm_max = str(ROOT / "tests" / "problems" / "gemm_max.py")
    report = engine.verify(gemm_max, str(CANDIDATES / "bf16_row_max.py"), precision="bf16", **FAST)
    assert report.verdict == "pass" and report.precision == "bf16", (report.mismatches, report.findings)


BF16_OPS = """
import numpy as np, torch, triton, triton.language as tl
from kforge_mcp.targets.triton.interpreter_bf16 import narrow_bits
from kforge_mcp.core.settings import Settings
from kforge_mcp.targets.triton.target import TritonTarget

@triton.jit
def ops(x_ptr, y_ptr, f_ptr, o_ptr, i_ptr, d_ptr):
    r = tl.arange(0, 64)
    x, y = tl.load(x_ptr + r), tl.load(y_ptr + r)
    tl.store(o_ptr + r, x * y + x)
    tl.store(o_ptr + 64 + r, tl.where(x < y, -x, tl.maximum(y, 0.25)))
    tl.store(o_ptr + 128 + r, tl.clamp(x, -0.5, y))
    tl.store(o_ptr + 192 + r, tl.load(f_ptr + r).to(tl.bfloat16))
    tl.store(o_ptr + 256 + r, tl.cumsum(x, 0))
    tl.store(o_ptr + 320 + r, tl.sum(x, 0) + tl.zeros_like(x))
    tl.store(i_ptr + r, (x * 8).to(tl.int32))
    tl.store(i_ptr + 64 + r, tl.argmax(x, 0) + tl.zeros_like(r))
    tl.store(o_ptr + 384 + r, (x > y).to(tl.bfloat16) + x)
    s = tl.arange(0, 16)
    m = tl.load(x_ptr + s[:, None] * 4 + s[None, :] % 4)  # 16x16 bf16
    tl.store(d_ptr + s[:, None] * 16 + s[None, :], tl.dot(m, m))

g = torch.Generator().manual_seed(0)
x, y = (torch.randn(64, generator=g).bfloat16() for _ in range(2))
f = torch.randn(64, generator=g)
f[:4] = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 3.4e38])  # ties to even, and past bf16's max
out, ints, d = torch.zeros(7, 64, dtype=torch.bfloat16), torch.zeros(2, 64, dtype=torch.int32), torch.zeros(16, 16)
with TritonTarget(Settings.read()).emulate_precision("cpu"):
    ops[(1,)](x, y, f, out, ints, d)
exact = [x * y + x, torch.where(x < y, -x, y.clamp(min=0.25)), torch.minimum(x.clamp(min=-0.5), y), f.bfloat16()]
for row, want in [*enumerate(exact), (6, (x > y).bfloat16() + x)]:
    assert torch.equal(out[row], want), (row, out[row], want)
assert torch.allclose(out[4].float(), x.float().cumsum(0), rtol=2**-7, atol=2**-7), out[4]
assert torch.allclose(out[5].float(), x.float().sum().expand(64), rtol=2**-7), out[5]
assert torch.equal(ints[0], (x * 8).to(torch.int32)) and (ints[1] == int(x.argmax())).all(), ints
m = x.float().view(16, 4)[:, torch.arange(16) % 4]
assert torch.allclose(d, m @ m, rtol=1e-6, atol=1e-6), (d - m @ m).abs().max()
assert np.array_equal(narrow_bits(f.numpy()), f.bfloat16().view(torch.int16).numpy().view(np.uint16))
"""


def test_bf16_arithmetic_under_the_interpreter_rounds_as_torch_does():
    """Under a verify's emulation the interpreter's bf16 ops see values, not bit patterns, and round to
    nearest even: elementwise results equal torch's bf16 ops bit for bit. In a fresh interpreter process,
    as in a worker of the CPU lane."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-c", BF16_OPS], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]


def test_torch_tf32_switched_on_is_named_as_not_checked_on_the_cpu(engine):
    report = verify(engine, "tf32_switch")
    assert "precision_not_emulated" in codes(report)
    after = verify(engine, "honest")  # the switch does not outlive the job in the warm worker
    assert "precision_not_emulated" not in codes(after) and after.verdict == "pass"


# ---- threads: the candidate's, not the runtime's ----

OWNER = "/tmp/kforge-test/candidate.py"


def _code(source: str, filename: str) -> dict:
    namespace = {"threading": threading, "ThreadPoolExecutor": ThreadPoolExecutor}
    exec(compile(source, filename, "exec"), namespace)
    return namespace


STARTERS = """
stop = threading.Event()
def start_thread():
    threading.Thread(target=stop.wait, name="started-here", daemon=True).start()
def start_pool():
    pool = ThreadPoolExecutor(1, thread_name_prefix="pool-here")
    pool.submit(stop.wait)
    return pool
"""


@pytest.mark.parametrize(("where", "blamed"), [(OWNER, True), ("/usr/lib/python3/site-packages/triton/x.py", False)])
def test_threads_are_blamed_only_when_the_candidate_starts_them(where, blamed):
    ns = _code(STARTERS, where)
    try:
        with ThreadWatch({OWNER}) as watch:
            ns["start_thread"]()
            pool = ns["start_pool"]()
        found = watch.finding()
        assert found is not None and found.code == ("spawned_threads" if blamed else "runtime_threads")
        assert (found.severity == "suspicious") == blamed, (watch.left, watch.excused)
        if not blamed:
            assert {"started-here"} <= set(watch.excused)
    finally:
        ns["stop"].set()
        pool.shutdown()


def test_a_thread_started_around_the_watch_is_judged_by_what_it_runs():
    ns = _code("stop = threading.Event()\ndef work():\n    stop.wait()\nstart = threading.Thread.start\n", OWNER)
    try:
        with ThreadWatch({OWNER}) as watch:
            ns["start"](threading.Thread(target=ns["work"], daemon=True, name="sneaky"))  # start bound before the watch
        assert watch.finding().code == "spawned_threads" and watch.left == ["sneaky"]
    finally:
        ns["stop"].set()


# ---- module state ----


@pytest.mark.parametrize(
    ("candidate", "verdict", "code"),
    [
        ("bn_honest", "pass", None),
        ("bn_stateless", "fail", "buffers_differ"),
        ("bn_renamed", "pass", "buffers_not_compared"),
    ],
)
def test_training_mode_buffers_are_compared(engine, candidate, verdict, code):
    report = verify(engine, candidate, prob=str(CHEATS / "bn_problem.py"))
    assert report.verdict == verdict, (report.findings, report.mismatches, report.errors)
    if code:
        assert code in codes(report)
    else:
        assert not {"buffers_differ", "buffers_not_compared"} & codes(report)


# ---- guards whose tests could fail ----


def test_a_renamed_gc_lookup_is_caught_without_the_static_check(engine):
    report = verify(engine, "gc_lookup_renamed", trials=3)
    assert "introspection" not in codes(report)  # the static check cannot see it...
    assert report.verdict == "fail" and report.mismatches  # ...and the run-time order still defeats it


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_free_cuda_memory_is_poisoned():
    from kforge_mcp.devices.device import get_device

    x = torch.full((1 << 20,), 7.0, device="cuda")
    ptr = x.data_ptr()
    del x  # back to the caching allocator, still holding 7.0
    get_device("cuda:0").poison_free_memory()
    y = torch.empty((1 << 20,), device="cuda")
    assert not bool((y == 7.0).any()), "freed memory still held the old values"
    assert y.data_ptr() != ptr or bool(torch.isnan(y).all())
