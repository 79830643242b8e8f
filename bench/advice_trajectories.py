"""Advice trajectories: does following only the analysis agent's top advice take a kernel where the best go?

Per problem (KernelBench Level 2 fp32 problems judged at 1e-4, bench/problems/<name>.py), the candidates
bench/candidates/<name>/step<N>_<what>.py form a trajectory: step 0 is a plain first kernel, and each later
step changes only what the previous step's top recommendation asked for (its docstring quotes that advice).
Each step is verified as a user would (kforge's verify: fresh inputs, the L2 flushed, eager and torch.compile
timed in interleaved rounds, the bound from the compute paths measured on the problem) and profiled with
Nsight Compute (depth metrics), and the agent's advice on that profile is recorded.

Three sets of problems: `gemm` (four GEMM + tail problems, the default), `conv` (six convolution problems, records
under bench/results/advice-trajectories/conv-<gpu>/) and `small-conv` (four problems with small convolutions, held out
from the rules: small-conv-<gpu>/). On the GPU, one step of every problem of a set per call (the
next step is written from what it says):

    PYTHONPATH=$PWD python bench/advice_trajectories.py run [--set conv] --step N --out OUT

A call stops before a problem it may not finish within --deadline-s (its longest problem so far as the guide) and
says which are left; a later call with --problems and the same OUT (its step file copied back there) adds theirs.

Where the rules changed after a step's GPU run, the advice the next step follows is that step's profiles read again
here, offline (written beside the record, which stays as the GPU wrote it; the report shows it as re-read):

    python bench/advice_trajectories.py reread bench/results/advice-trajectories/conv-h200/step7.json

A finished record's steps are kept packed (`python bench/packed_captures.py pack|unpack DIR`): report and the
calibration read them either way; reread and run want them unpacked.

Then, here, the record and its checks (fractions <= 1, never null, rising as kernels get faster; the last
step's geomean speedup over the faster of eager and torch.compile):

    python bench/advice_trajectories.py report --dir bench/results/advice-trajectories/h200
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "bench" / "problems"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from packed_captures import unpacked  # noqa: E402  (a finished record's steps may be packed)

SETS = {
    "gemm": (
        "gemm_multiply_leakyrelu_l2",
        "matmul_divide_gelu_l2",
        "gemm_scaling_hardtanh_gelu_l2",
        "matmul_gelu_softmax_l2",
    ),
    "conv": (
        "conv3d_groupnorm_mean_l2",
        "conv2d_subtract_tanh_subtract_avgpool_l2",
        "convtranspose3d_mean_add_softmax_tanh_scaling_l2",
        "convtranspose2d_mish_add_hardtanh_scaling_l2",
        "convtranspose3d_relu_groupnorm_l2",
        "convtranspose3d_avgpool_clamp_softmax_multiply_l2",
    ),
    # held out: four more Level 2 problems whose convolutions are small (at most 128 multiply-adds an output pixel
    # into at most 32 channels), none of them read while any rule was written
    "small-conv": (
        "conv2d_add_scale_sigmoid_groupnorm_l2",
        "conv3d_softmax_maxpool_maxpool_l2",
        "conv3d_multiply_instancenorm_clamp_multiply_max_l2",
        "convtranspose3d_scaling_avgpool_biasadd_scaling_l2",
    ),
}
DEFAULT_SET = "gemm"
TOP = 3  # recommendations kept per step; the trajectory follows the first
DEADLINE_S = 480.0  # a step's call on the GPU fits in 8 minutes: no problem starts that would end past it
WEIGHTS_ONCE_NOTE = (
    "- `weights_once` comes from following data through two forwards on different inputs (profiling/weight_work.py): "
    "the launches that read only parameters and return the same bytes both times."
)
TIMES_NOTE = (
    "- Times are verify's medians (L2 flushed, fresh inputs per call); realized gains compare consecutive steps' "
    "medians, over a step that failed without a time (the step after it repairs it, following the same advice)."
)
NOTES = {
    "gemm": [
        "Reading these numbers:",
        "",
        "- Precision paths are the ones measured on each problem's inputs (verify's bound, `bound path`): bf16x3 for the "
        "two problems whose outputs keep the GEMM's magnitude, fp16 where the divide by 10 shrinks the rounding below the "
        "tolerance, fp8 where the softmax's outputs (about 1/8192) leave the tolerance's absolute term 1e-4 far above the "
        "GEMM's rounding. Every verdict is kforge's fp32 check at atol = rtol = 1e-4 on fresh inputs.",
        "- A `suspicious` step is a verdict, not a pass: the fp8 kernel of step 1 computed its scales with torch.amax "
        "(`torch_op_instead_of_kernel`); its next step also moved that into a Triton kernel, the repair the verdict "
        "asks for.",
        WEIGHTS_ONCE_NOTE,
        TIMES_NOTE,
        "",
    ],
    "conv": [
        "Reading these numbers:",
        "",
        "- Every verdict is kforge's fp32 check at atol = rtol = 1e-4 on fresh inputs. The bound path is the one "
        "measured on the problem's inputs where that measurement (the reference run on the host's CPU once per path) "
        "ended within the verify; otherwise verify's notes say the bound judged the paths by their rounding.",
        "- Two problems judge less than their verdicts suggest: with GroupNorm's weight as initialized (ones), "
        "conv3d_groupnorm_mean_l2 returns the mean of GroupNorm's bias whatever the convolution computes (a "
        "normalized group has mean zero), and the softmax outputs of "
        "convtranspose3d_avgpool_clamp_softmax_multiply_l2 (about 1/131072) lie below atol itself. "
        "bench/conv_step_check.py checks the kernels where both can fail.",
        "- conv2d_subtract_tanh_subtract_avgpool_l2's sixth step fails on the GPU (0.06% of outputs off by up to "
        "0.11) and passes the interpreter at the published shapes: Triton 3.6 reloads its register-fed MMA operand "
        "while three wgmma still read it (triton-lang/triton#9433). Its seventh step repairs it, following the same "
        "advice (step 5's): both operands from shared memory, two 64-row boxes a step.",
        "- Steps that followed feeding advice on a convolution and lost (23 and 61 at step 4, 13 and 38 at step 5) "
        "changed tiles or programs per SM; the record of what each changed is its docstring. Triton 3.6 serialized "
        "the wgmma of several of these kernels (ptxas C7514/C7515), which the profiles record from the sixth step on.",
        "- convtranspose3d_avgpool_clamp_softmax_multiply_l2 went on alone past the sixth step, the only problem whose "
        "top advice there was one its kernel had not yet followed. Its eighth step kept the serialization (a loop "
        "over phases between the tile and K loops still zeroed the accumulator; `kforge compile` with Triton 3.6 "
        "warns of it); its ninth removed it and ran slower: its K loops are 3-24 steps, and it is the epilogue, not "
        "the MMAs' waits, that idles the tensor pipe. The rules now price serialization on a convolution low, as "
        "they price feeding its tensor pipe.",
        "- Read with today's rules, every problem's last passing kernel has made the change `feed_tensor_pipe` asks of "
        "a convolution (operands by TMA, two resident programs per SM, MMAs not serialized): the advice is set apart "
        "as done already.",
        "- convtranspose2d_mish_add_hardtanh_scaling_l2's sixth step was run again once the rules read an epilogue's "
        "logs (`epilogue_logs`: the reference takes a log of each of its 537M outputs in mish, and the kernel's PTX "
        "inlined 64 copies of libdevice's polynomial log): its kernel issued 1.62G warp instructions a forward with "
        "its issue slots 60% busy, and the advice priced mish without a log at 22%. The seventh step computes it with "
        "one exp and one division an element: 1.17G instructions, 22% faster. Nothing is ranked after it; the other "
        "problems' epilogues take no log.",
        "- Read again once the rules knew a tile's sums reduced across threads (`tile_sums`), 23's sixth step and 38's "
        "ninth have that as their top advice: their kernels sum every tile over its rows and add the sums with "
        "atomics, after K loops of 9-24 steps. The steps that follow it, and 38's next one, ran on an H200 beside "
        "these six problems' last steps there (conv-h200.md).",
        WEIGHTS_ONCE_NOTE,
        TIMES_NOTE,
        "",
    ],
    "small-conv": [
        "Reading these numbers:",
        "",
        "- Every verdict is kforge's fp32 check at atol = rtol = 1e-4 on fresh inputs; bench/conv_step_check.py "
        "--set small-conv checks the same kernels on a CPU at reduced shapes with constant parameters redrawn.",
        TIMES_NOTE,
        "",
    ],
}


def compact(record: dict) -> str:
    """A record as one line of JSON: bench/ has a size limit."""
    return json.dumps(record, separators=(",", ":"), default=str) + "\n"


def step_files(problem: str, step: int) -> list[Path]:
    return sorted((ROOT / "bench" / "candidates" / problem).glob(f"step{step}_*.py"))


def verify_summary(r) -> dict:
    t = r.timing
    return {
        "verdict": r.verdict,
        "precision": r.precision,
        "atol": r.atol,
        "rtol": r.rtol,
        "candidate_ms": t.candidate.median_ms if t and t.candidate else None,
        "eager_ms": t.eager.median_ms if t and t.eager else None,
        "compiled_ms": t.compiled.median_ms if t and t.compiled else None,
        "speedup": r.speedup,
        "speedup_over": r.speedup_over,
        "speedup_ci": r.speedup_ci,
        "sol_ms": r.sol_ms,
        "fraction_of_sol": r.fraction_of_sol,
        "sol_path": r.sol_path,
        "findings": [{"code": f.code, "severity": f.severity, "message": f.message[:300]} for f in r.findings],
        "mismatches": [m.model_dump() for m in r.mismatches][:2],
        "errors": [e[:600] for e in r.errors][:3],
        "seconds": r.seconds,
        "phases": r.phases,  # where the seconds went: what the next call's time is estimated from
    }


def profile_summary(p, a) -> dict:
    roof = p.roofline
    return {
        "source": p.source,
        "seconds": p.seconds,
        "device_ms_per_forward": p.device_ms_per_forward,
        "kernels": [
            {
                "name": k.name[:80],
                "ms": k.device_ms,
                "category": k.category,
                "compute_path": k.compute_path,
                "pipes": {n: v for n, v in k.pipes.items() if v and v >= 1},
                "dram_pct": k.dram_throughput_pct,
                "sm_pct": k.sm_throughput_pct,
                "occupancy_pct": k.achieved_occupancy_pct,
                "registers": k.registers,
                "shared_bytes": k.shared_bytes,
            }
            for k in sorted(p.device_kernels(), key=lambda k: -k.device_ms)[:5]
        ],
        "roofline": None
        if roof is None
        else {
            "path": roof.path,
            "bound": roof.bound,
            "sol_ms": roof.sol_ms,
            "fraction_of_sol": roof.fraction_of_sol,
            "correction": roof.correction,
            "levers": [lv.model_dump() for lv in roof.levers],
        },
        "errors": [e[:600] for e in p.errors][:3],
        "advice": [
            {
                "rule": rec.rule,
                "priority": rec.priority,
                "expected_gain": rec.expected_gain,
                "gain_basis": rec.gain_basis,
                "title": rec.title,
                "action": rec.action,
                "stop": rec.stop,
                "lowers_bound": rec.lowers_bound,
            }
            for rec in (a.recommendations[:TOP] if a else [])
        ],
        "summary": a.summary if a else None,
        "stop": a.stop if a else None,
    }


def run(step: int, out: Path, problems: list[str], deadline_s: float = DEADLINE_S) -> list[str]:
    """Verify, profile and analyze each problem's step ``step`` into ``out``/step<N>.json, keeping the records of
    other problems already there; returns the problems left for a later call (the deadline came first)."""
    from device_label import device_label

    from kforge_mcp.api import Engine

    out.mkdir(parents=True, exist_ok=True)
    path = out / f"step{step}.json"
    kept = json.loads(path.read_text())["records"] if path.exists() else []
    records = [r for r in kept if r["problem"] not in problems]
    order = [n for members in SETS.values() for n in members]
    engine = Engine(home=Path(tempfile.mkdtemp(prefix="kforge-trajectory-")))
    started, longest = time.time(), 0.0
    try:
        for i, name in enumerate(problems):
            if time.time() - started + longest > deadline_s:
                left = problems[i:]
                print(f"stopped before the deadline ({deadline_s:.0f} s); left for a later call: {' '.join(left)}")
                return left
            problem = str(PROBLEMS / f"{name}.py")
            begun = time.time()
            for cand in step_files(name, step):
                t0 = time.time()
                rec: dict = {"problem": name, "step": step, "candidate": cand.name}
                v = engine.verify(problem, str(cand), target="triton", timeout_s=420)
                rec["verify"] = verify_summary(v)
                p = engine.profile(problem, str(cand), target="triton", depth="metrics", timeout_s=300)
                a = engine.analyze_profile(profile=p.model_dump()) if not p.errors else None
                rec["profile"] = profile_summary(p, a)
                rec["profile_report"] = p.model_dump(mode="json")  # the whole report: advice can be re-read offline
                rec["wall_s"] = round(time.time() - t0, 1)
                records.append(rec)
                records.sort(key=lambda r: order.index(r["problem"]) if r["problem"] in order else len(order))
                payload = {"device": device_label(), "step": step, "records": records}  # kept if a later one hangs
                path.write_text(compact(payload))
                top = rec["profile"]["advice"][0] if rec["profile"]["advice"] else {}
                print(
                    f"{name} {cand.name}: {v.verdict} {rec['verify']['candidate_ms']} ms, speedup {v.speedup} over "
                    f"{v.speedup_over}, fraction {v.fraction_of_sol}; top advice {top.get('rule')} "
                    f"({top.get('priority')}, {top.get('expected_gain')}); {rec['wall_s']} s "
                    f"({time.time() - started:.0f} s into the call)",
                    flush=True,
                )
            longest = max(longest, time.time() - begun)
    finally:
        engine.close()
    return []


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def problem_set(problems) -> str:
    """The set whose problems the records hold."""
    for name, members in SETS.items():
        if set(problems) <= set(members):
            return name
    raise SystemExit(f"the records hold problems of no one set ({', '.join(sorted(problems))}): see SETS")


def reread(step_file: Path) -> Path:
    """The advice on a recorded step's GPU profiles read again here, offline, by the rules as they are now (with
    the problem's roofline, its compute paths measured as verify measures them): what the next step follows when
    the rules changed after the GPU run. Written beside the record as reread-step<N>.json; the record stays as the
    GPU run wrote it."""
    from kforge_mcp.advice import agent
    from kforge_mcp.api import Engine
    from kforge_mcp.judge.roofline import with_measured
    from kforge_mcp.profiling.report import ProfileReport

    data = json.loads(step_file.read_text())
    out: dict = {
        "device": data["device"],
        "step": data["step"],
        "read": "offline, the rules at this commit",
        "advice": {},
    }
    engine = Engine(home=Path(tempfile.mkdtemp(prefix="kforge-reread-")))
    try:
        for rec in data["records"]:
            p = ProfileReport.model_validate(rec["profile_report"])
            roof = engine.roofline(
                str(PROBLEMS / f"{rec['problem']}.py"), device_name=p.device_name, atol=1e-4, rtol=1e-4
            )
            p.roofline = with_measured(roof, rec["verify"]["candidate_ms"])
            out["advice"][rec["problem"]] = profile_summary(p, agent.analyze(p))["advice"]
    finally:
        engine.close()
    target = step_file.parent / f"reread-{step_file.name}"
    target.write_text(compact(out))
    return target


def timed_pairs(recs: list[dict]) -> list[tuple[dict, dict]]:
    """Each step with a time and the next one, over steps that failed without one: a failed step has no profile, so
    the step after it (its repair) followed the same advice."""
    timed = [r for r in recs if r["verify"]["candidate_ms"]]
    return list(zip(timed, timed[1:]))


def advice_followed(folder: Path, rec: dict) -> tuple[list[dict], bool]:
    """The advice the next step followed: the re-read one where the rules changed after the GPU run, else the
    record's own; and whether it was re-read."""
    reread_file = folder / f"reread-step{rec['step']}.json"
    if reread_file.exists():
        return json.loads(reread_file.read_text())["advice"].get(rec["problem"], []), True
    return rec["profile"]["advice"], False


def report(folder: Path) -> int:
    """The record's markdown beside its folder (``folder``.md), from its steps loose or packed."""
    with unpacked(folder) as records:
        return write_report(records, folder.parent / f"{folder.name}.md")


def write_report(folder: Path, target: Path) -> int:
    steps = sorted(folder.glob("step*.json"), key=lambda p: int(p.stem[4:]))
    by_problem: dict[str, list[dict]] = {}
    device = ""
    for f in steps:
        data = json.loads(f.read_text())
        device = data["device"]
        for rec in data["records"]:
            by_problem.setdefault(rec["problem"], []).append(rec)
    which = problem_set(by_problem)
    command = "run --step N" if which == DEFAULT_SET else f"run --set {which} --step N"
    intro = folder / "intro.md"  # what the folder's steps are, where they are not a whole trajectory
    lines = [
        f"# Advice trajectories ({device})",
        "",
        *([intro.read_text().strip(), ""] if intro.is_file() else []),
        f"`python bench/advice_trajectories.py {command}` on the GPU, one call per step; each step's candidate "
        "changes only what the previous step's top recommendation asked for (its docstring quotes it). "
        "Speedup: over the faster of eager and torch.compile, both timed in interleaved rounds with the candidate.",
        "",
    ]
    problems_ok, last, bests = [], [], []
    for name, recs in by_problem.items():
        lines += [
            f"## {name}",
            "",
            "| step | candidate | verdict | ms | eager ms | compiled ms | speedup | fraction_of_sol | bound path | top advice (priority, expected gain) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        passing = []
        for rec in recs:
            v = rec["verify"]
            followed, reread_now = advice_followed(folder, rec)
            top = followed[0] if followed else None
            advice = f"`{top['rule']}` ({top['priority']}, {top['expected_gain']:.0%})" if top else "none"
            advice += " (re-read)" if reread_now else ""
            path = (v["sol_path"] or "").split(" ", 1)[0]
            frac = v["fraction_of_sol"]
            lines.append(
                f"| {rec['step']} | {rec['candidate']} | {v['verdict']} | {fmt(v['candidate_ms'])} | "
                f"{fmt(v['eager_ms'])} | {fmt(v['compiled_ms'])} | {fmt(v['speedup'], 'x')} | {fmt(frac)} | {path} | "
                f"{advice} |"
            )
            if v["verdict"] == "pass":
                passing.append(rec)
        lines.append("")
        lines.append("| step -> next | top advice followed | expected gain | realized (1 - next ms / ms) |")
        lines.append("| --- | --- | --- | --- |")
        for rec, nxt in timed_pairs(recs):
            followed, _ = advice_followed(folder, rec)
            top = followed[0] if followed else None
            a, b = rec["verify"]["candidate_ms"], nxt["verify"]["candidate_ms"]
            if top:  # both steps have a time (timed_pairs)
                lines.append(
                    f"| {rec['step']} -> {nxt['step']} | `{top['rule']}` | {top['expected_gain']:.0%} | {1 - b / a:.0%} |"
                )
        lines.append("")
        for rec in recs:
            followed, reread_now = advice_followed(folder, rec)
            if followed:
                top = followed[0]
                lines.append(
                    f"- step {rec['step']} top advice{' (re-read offline)' if reread_now else ''}: **{top['title']}**: "
                    f"{top['action']} ({top['gain_basis']})"
                )
        lines.append("")
        fr = [(r["verify"]["candidate_ms"], r["verify"]["fraction_of_sol"]) for r in passing]
        never_null = all(f is not None for _, f in fr)
        at_most_1 = all(f is not None and f <= 1 for _, f in fr)
        ranked = sorted(fr)
        rising = all(a[1] >= b[1] for a, b in zip(ranked, ranked[1:]) if a[1] is not None and b[1] is not None)
        problems_ok.append(never_null and at_most_1 and rising)
        best = max((r["verify"]["speedup"] or 0 for r in passing), default=0)
        final = passing[-1]["verify"]["speedup"] if passing else None
        last.append(final)
        bests.append(best)
        lines.append(
            f"checks: fractions never null {never_null}, <= 1 {at_most_1}, faster kernel has the larger fraction "
            f"{rising}; last step's speedup {fmt(final, 'x')}, best {fmt(best, 'x')}"
        )
        lines.append("")
    lines += NOTES[which]
    done = [x for x in last if x]
    gm = geomean(done) if done and len(done) == len(last) else None
    failed = [recs[-1]["problem"] for recs in by_problem.values() if recs[-1]["verify"]["verdict"] != "pass"]
    lines.append(
        f"**Last passing step, geomean speedup over the faster of eager and torch.compile: {fmt(gm, 'x')}** "
        + (f"(the last step of {', '.join(failed)} failed its verdict: its step before counts) " if failed else "")
    )
    lines.append(f"Best step of each problem, geomean: {fmt(geomean([b for b in bests if b]), 'x')}")
    lines.append(f"fractions checked on every problem: {all(problems_ok)}")
    target.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(problems_ok) else 1


def fmt(x, unit: str = "") -> str:
    if x is None:
        return "-"
    return f"{x:.3g}{unit}" if unit else (f"{x:.4g}" if isinstance(x, float) else str(x))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--set", choices=SETS, default=DEFAULT_SET, help="the problems to run (default: %(default)s)")
    r.add_argument("--step", type=int, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--problems", nargs="*", help="these of the set only (default: all of it)")
    r.add_argument(
        "--deadline-s", type=float, default=DEADLINE_S, help="start no problem past this (default: %(default)s)"
    )
    rep = sub.add_parser("report")
    rep.add_argument("--dir", type=Path, required=True)
    rr = sub.add_parser("reread", help="a step's GPU profiles read again by the rules as they are now")
    rr.add_argument("step_file", type=Path)
    args = ap.parse_args()
    if args.cmd == "reread":
        print(reread(args.step_file))
        return 0
    if args.cmd == "run":
        unknown = set(args.problems or ()) - set(SETS[args.set])
        if unknown:
            ap.error(f"not in the {args.set} set: {', '.join(sorted(unknown))}")
        return 1 if run(args.step, args.out, args.problems or list(SETS[args.set]), args.deadline_s) else 0
    return report(args.dir)


if __name__ == "__main__":
    sys.exit(main())
