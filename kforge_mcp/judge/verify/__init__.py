"""One verify, inside a worker: verifier.py runs it (the problem, the candidate, the verdict); calls.py holds its
state and guarded calls, trials.py the correctness trials, timed.py the timing with the baselines, findings.py the
findings beyond a mismatch."""

from kforge_mcp.judge.verify.verifier import Verifier, run_baselines, run_verify

__all__ = ["Verifier", "run_baselines", "run_verify"]
