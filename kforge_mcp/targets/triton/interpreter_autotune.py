"""Autotuned kernels under Triton's CPU interpreter. The autotuner times each config with a GPU driver's
benchmarker, which the interpreter has none of ("0 active drivers ([]). There should only be one."), so
while a verify runs there each autotuned kernel runs the first of its configs that runs, as a GPU would
run one of them: correctness is judged on that config, and the report names it."""

from __future__ import annotations

import contextlib
import math

from kforge_mcp.core.schemas import Finding


class FirstConfigs:
    """The config each autotuned kernel ran, by kernel name, for the report."""

    def __init__(self):
        self.chosen: dict[str, str] = {}

    def findings(self) -> list[Finding]:
        if not self.chosen:
            return []
        named = "; ".join(f"{k}: {c}" for k, c in sorted(self.chosen.items()))
        return [
            Finding(
                code="autotune_first_config",
                severity="info",
                evidence={"configs": dict(self.chosen)},
                message="Triton's interpreter cannot time autotune configs, so each autotuned kernel ran the first "
                f"of its configs that runs ({named}); on a GPU the autotuner times them all and keeps the fastest",
            )
        ]


@contextlib.contextmanager
def first_config_that_runs():
    """While open, an autotuner 'times' a config by running it once: the first that runs wins (0 s), the
    ones after it are not run (inf), and one that raises is dropped as a failing config is on a GPU."""
    from triton.runtime.autotuner import Autotuner

    state = FirstConfigs()
    real_run, real_bench = Autotuner.run, Autotuner.__dict__.get("do_bench")
    found: dict[int, bool] = {}  # autotuner -> a config of the current round ran

    def bench_by_running(tuner):
        def do_bench(fn, quantiles=None, **_):
            if not found.get(id(tuner)):
                try:
                    fn()
                    found[id(tuner)] = True
                    return [0.0] * len(quantiles) if quantiles else 0.0
                except Exception:  # noqa: BLE001  (a config that cannot run here: the next one is tried)
                    pass
            return [math.inf] * len(quantiles) if quantiles else math.inf

        return do_bench

    def run(self, *args, **kwargs):
        found[id(self)] = False
        result = real_run(self, *args, **kwargs)
        best = getattr(self, "best_config", None)
        if best is not None and len(self.configs) > 1:
            knobs = {**best.kwargs, "num_warps": best.num_warps, "num_stages": best.num_stages}
            state.chosen[self.base_fn.__name__] = ", ".join(f"{k}={v}" for k, v in knobs.items())
        return result

    Autotuner.do_bench = property(bench_by_running)
    Autotuner.run = run
    try:
        yield state
    finally:
        Autotuner.run = real_run
        if real_bench is not None:
            Autotuner.do_bench = real_bench
        else:
            del Autotuner.do_bench
