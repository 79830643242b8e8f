"""The rule contract (advice/rules/base.py: a name, what the rule needs, the vendors it applies to, named
thresholds, wording per target) and the ranking (advice/rules/ranking.py: one price per change, no advice
priced at nothing among the ranked, an order that agrees with priority), on the real captured profiles
(tests/data: the captured profiles, the H100 corpus' ncu pages, the H200 advice trajectories)."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from kforge_mcp.advice import agent, kinds
from kforge_mcp.advice.calibration import Workload, analyze_measured
from kforge_mcp.advice.rules import (
    RULES,
    Rule,
    Wording,
    compiled,
    compute,
    conv,
    fusion,
    launch,
    memory,
    structure,
    tensor_cores,
    timeline,
)
from kforge_mcp.advice.rules.base import DEVICE_KERNELS, PRIORITY_RANK, RANKING, recommendation
from kforge_mcp.judge.roofline import make_roofline
from kforge_mcp.profiling.loader import load_profile
from kforge_mcp.profiling.report import ProfileReport, Recommendation

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "profiles"
TRAJECTORIES = ROOT / "tests" / "data" / "advice-trajectories" / "h200.json"
CORPUS = ROOT / "tests" / "data" / "analysis-corpus"
RULE_MODULES = (kinds, compute, tensor_cores, conv, memory, fusion, launch, structure, timeline, compiled)


def recorded_steps() -> list[dict]:
    problems = json.loads(TRAJECTORIES.read_text())["problems"]
    return [{**rec, "problem": name} for name, recs in problems.items() for rec in recs]


def corpus_analyses():
    """The H100 corpus' raw pages, each with its case's roofline and the time measured outside ncu."""
    for case in json.loads((CORPUS / "cases.json").read_text())["cases"]:
        report = load_profile(str(CORPUS / f"{case['name']}.ncu-raw.csv"))
        yield case["name"], analyze_measured(report, Workload(**case["workload"]), case["device"], case["measured_ms"])


def every_real_analysis():
    """The agent's analysis of every real profile the repository holds."""
    for path in sorted(DATA.iterdir()):
        if path.suffix in (".csv", ".json", ".hatchet", ".xml") and path.name != "capture-summary.json":
            yield path.name, agent.analyze(load_profile(str(path)))
    yield from corpus_analyses()
    for rec in recorded_steps():
        yield f"{rec['problem']} {rec['candidate']}", agent.analyze(ProfileReport.model_validate(rec["profile_report"]))


@pytest.fixture(scope="module")
def analyses():
    return list(every_real_analysis())


# ---- the contract ----


def test_every_rule_declares_its_needs_and_named_frozen_thresholds():
    assert isinstance(RULES, tuple) and len({r.name for r in RULES}) == len(RULES)
    for rule in RULES:
        assert isinstance(rule, Rule) and rule.needs, rule.name
        assert dataclasses.is_dataclass(rule.thresholds) and rule.thresholds.__dataclass_params__.frozen, rule.name
    # the two issue-slot marks measure different things and say so in their names
    assert kinds.KINDS.waiting_issue_pct == 40 and launch.LAUNCH.latency_advice_issue_pct == 60


def test_no_rule_compares_against_an_unnamed_number():
    """Every threshold is a named field of a thresholds dataclass: no comparison in the rule modules (or kinds.py)
    has a number literal on either side other than 0, 1 and 100 (the whole of a percentage)."""
    unnamed = []
    for module in RULE_MODULES:
        tree = ast.parse(Path(module.__file__).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                for side in (node.left, *node.comparators):
                    if (
                        isinstance(side, ast.Constant)
                        and type(side.value) in (int, float)
                        and side.value not in (0, 1, 100)
                    ):
                        unnamed.append(f"{module.__name__}:{node.lineno} {ast.unparse(node)}")
    assert not unnamed, unnamed


def wordings():
    for module in RULE_MODULES:
        for name, value in vars(module).items():
            if isinstance(value, Wording):
                yield f"{module.__name__}.{name}", value
            elif isinstance(value, dict) and value and all(isinstance(w, Wording) for w in value.values()):
                yield from ((f"{module.__name__}.{name}[{key}]", w) for key, w in value.items())


def test_neutral_wording_names_no_language_and_targets_name_their_own():
    seen = list(wordings())
    assert len(seen) >= 20
    languages = {
        "triton": ("tl.", "num_warps", "num_stages", "BLOCK_"),
        "cuda": ("threadIdx", "__shfl", "__shared__", "__launch_bounds__", "cp.async", "wmma::"),
        "cute": ("MMA atom", "copy atom", "Swizzle", "PipelineTma"),
    }
    for name, w in seen:
        assert not any(term in w.neutral for terms in languages.values() for term in terms), (name, w.neutral)
        for target, text in w.targets.items():
            others = [t for lang, terms in languages.items() if lang != target for t in terms if t in text]
            assert not others, (name, target, others)


def gemm_report(target: str | None) -> ProfileReport:
    report = load_profile(str(DATA / "gemm_bias_relu-triton.ncu-raw.csv"))
    report.roofline = make_roofline(
        2 * 256 * 512 * 384, 1.7e6, "fp32", report.device_name, report.device_ms_per_forward
    )
    report.target = target
    return report


@pytest.mark.parametrize(
    "target,says,never",
    [
        ("triton", ["tl.dot(a, b, acc, input_precision='tf32x3')"], ["mma.sync", "wmma::"]),
        ("cuda", ["mma.sync.aligned.m16n8k8 .tf32", "wmma::__float_to_tf32", "no library call"], ["tl.dot", "CUTLASS"]),
        ("cute", ["TF32 MMA atoms", "SM80_16x8x8_F32TF32TF32F32_TN"], ["tl.dot", "wmma::"]),
        ("metal", ["3xTF32: split each fp32 operand"], ["tl.dot", "mma.sync", "MMA atom"]),  # no Metal wording: neutral
        (None, ["3xTF32: split each fp32 operand"], ["tl.dot", "mma.sync", "MMA atom"]),
    ],
)
def test_the_action_is_worded_for_the_reports_target(target, says, never):
    a = agent.analyze(gemm_report(target))
    rec = next(r for r in a.recommendations if r.rule == "use_tensor_cores")
    assert all(s in rec.action for s in says) and not any(n in rec.action for n in never), rec.action
    grid = next(r for r in a.recommendations if r.rule == "grid_too_small")
    assert ("BLOCK_M" in grid.action) == (target == "triton") and ("gridDim" in grid.action) == (target == "cuda")


def test_the_rules_a_profile_lacks_the_parts_for_are_listed_with_what_they_need():
    a = agent.analyze(load_profile(str(DATA / "gemm_bias_relu-triton.ncu-raw.csv")))
    not_run = {n.rule: n.reason for n in a.rules_not_run}
    assert "grid_too_small" not in not_run and "use_tensor_cores" not in not_run
    assert "details page" in not_run["ncu_own_rules"] and "unitrace" in not_run["xve_stalled"]
    assert "compiled for an NVIDIA arch" in not_run["compiled_spills"] and "problem" in not_run["reference_structure"]
    ran = {r.name for r in RULES} - set(not_run)
    assert {r.rule for r in a.recommendations} <= ran
    # an Intel profile: the SM-count rule is NVIDIA's and says so when the profile has what it reads
    intel = load_profile(str(DATA / "fused_bias_gelu-triton_naive.unitrace.json"))
    for k in intel.kernels:
        k.grid = [4, 1, 1]
    reason = next(n.reason for n in agent.analyze(intel).rules_not_run if n.rule == "grid_too_small")
    assert reason == "applies to nvidia profiles; this one is from intel"


def test_a_rule_runs_only_where_its_needs_are_met():
    calls = []

    def check(report: ProfileReport, thresholds) -> list[Recommendation]:
        calls.append(report.source)
        return []

    rule = Rule("probe", check, RANKING, (DEVICE_KERNELS,))
    agent.analyze(ProfileReport(source="torch.profiler", device="cpu"), rules=[rule])
    agent.analyze(load_profile(str(DATA / "row_softmax-triton.ncu-raw.csv")), rules=[rule])
    assert calls == ["ncu"]


# ---- the ranking ----


def step(problem: str, n: int) -> dict:
    return next(r for r in recorded_steps() if r["problem"] == problem and r["candidate"].startswith(f"step{n}_"))


def test_one_change_proposed_by_two_rules_is_one_recommendation_with_both_evidences():
    """Step 2 of the fp16 trajectory converts linear.weight every forward: weights_once (measured, 29%) and the
    reference's weight lever (0%: outside the roofline's model) propose the same change."""
    rec = step("matmul_divide_gelu_l2", 2)
    a = agent.analyze(ProfileReport.model_validate(rec["profile_report"]))
    same = [r for r in a.recommendations + a.no_gain if r.change == structure.WEIGHTS_ONCE]
    assert len(same) == 1 and not any(r.rule == "reference_structure" for r in a.recommendations + a.no_gain)
    merged = same[0]
    assert merged.rule == "weights_once" and merged.also_from == ["reference_structure"]
    assert merged.expected_gain == pytest.approx(0.292, abs=1e-3) and merged is a.recommendations[0]
    metrics = {e.metric for e in merged.evidence}
    assert "launches on weights alone" in metrics and {"weights", "T_SOL"} <= metrics
    assert "reference_structure priced the same change at 0.000" in merged.gain_basis


def test_the_larger_better_founded_gain_is_kept():
    def proposing(gain: float, lowers: bool, rule: str):
        def check(report, thresholds):
            return [
                recommendation(
                    rule=rule, title=rule, action=rule, expected_gain=gain, change="the change", lowers_bound=lowers
                )
            ]

        return Rule(rule, check, RANKING)

    report = load_profile(str(DATA / "row_softmax-triton.ncu-raw.csv"))
    a = agent.analyze(report, rules=[proposing(0.2, True, "modelled"), proposing(0.2, False, "measured")])
    assert [(r.rule, r.also_from) for r in a.recommendations] == [("measured", ["modelled"])]
    a = agent.analyze(report, rules=[proposing(0.1, False, "measured"), proposing(0.3, True, "modelled")])
    assert [(r.rule, r.expected_gain) for r in a.recommendations] == [("modelled", 0.3)]


def test_advice_priced_at_nothing_is_set_apart(analyses):
    """The recorded steps listed the weight lever at 0% among their top three; now no ranked advice expects
    nothing, save a stop (a verdict) and an estimate whose range reaches a gain."""
    rec = step("gemm_multiply_leakyrelu_l2", 1)
    recorded = [(r["rule"], r["expected_gain"]) for r in rec["advice"]]
    assert ("reference_structure", 0.0) in recorded
    a = agent.analyze(ProfileReport.model_validate(rec["profile_report"]))
    assert [r.rule for r in a.recommendations] == ["feed_tensor_pipe"]
    assert [r.rule for r in a.no_gain] == ["reference_structure"]
    for name, a in analyses:
        for r in a.recommendations:
            assert r.stop or max(r.expected_gain, r.expected_gain_high or 0) >= RANKING.negligible_gain, (name, r.rule)
        assert all(r.expected_gain < RANKING.negligible_gain for r in a.no_gain), name


def test_the_order_agrees_with_priority(analyses):
    """The recorded step 0 of two trajectories ranked a low-priority use_tensor_cores (79%, marked uncertain
    though both ends of its range pay) above a high-priority advice; a high never follows a medium or low now."""
    rec = step("gemm_multiply_leakyrelu_l2", 0)
    recorded = [(r["rule"], r["priority"]) for r in rec["advice"]]
    assert recorded[:2] == [("use_tensor_cores", "low"), ("shared_bank_conflicts", "high")]
    a = agent.analyze(ProfileReport.model_validate(rec["profile_report"]))
    assert [(r.rule, r.priority) for r in a.recommendations[:2]] == [
        ("use_tensor_cores", "high"),
        ("shared_bank_conflicts", "high"),
    ]
    for name, a in analyses:
        ranks = [PRIORITY_RANK[r.priority] for r in a.recommendations if not r.stop]
        assert ranks == sorted(ranks), (name, [(r.rule, r.priority) for r in a.recommendations])


def test_a_low_priority_estimate_follows_a_high_one_whatever_its_gain():
    def fixed(rule: str, gain: float, **kw):
        return Rule(
            rule,
            lambda report, t: [recommendation(rule=rule, title=rule, action=rule, expected_gain=gain, **kw)],
            RANKING,
        )

    report = load_profile(str(DATA / "row_softmax-triton.ncu-raw.csv"))
    a = agent.analyze(report, rules=[fixed("unsure", 0.6, priority="low"), fixed("sure", 0.3), fixed("small", 0.1)])
    assert [(r.rule, r.priority) for r in a.recommendations] == [
        ("sure", "high"),
        ("small", "medium"),
        ("unsure", "low"),
    ]


def test_a_stop_stands_only_while_everything_else_is_low_priority():
    def stop_rule(report, t):
        return [recommendation(rule="limit", title="At the limit", action="Stop.", expected_gain=0.0, stop=True)]

    def other(gain: float):
        return Rule(
            "other", lambda r, t: [recommendation(rule="other", title="other", action="x", expected_gain=gain)], RANKING
        )

    report = load_profile(str(DATA / "row_softmax-triton.ncu-raw.csv"))
    stops = agent.analyze(report, rules=[Rule("limit", stop_rule, RANKING), other(0.05)])
    assert stops.stop and [r.rule for r in stops.recommendations] == ["limit", "other"]
    goes_on = agent.analyze(report, rules=[Rule("limit", stop_rule, RANKING), other(0.3)])
    assert not goes_on.stop and [r.rule for r in goes_on.recommendations] == ["other"]
    assert "Other advice is left, though: other." in goes_on.no_gain[0].action
