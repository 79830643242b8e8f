"""What a profile at depth 'metrics' asks Nsight Compute for (platforms/nvidia/ncu_metrics.py): the raw metrics the
parser turns into the report's fields, each of them read, no section, and the corpus' sections and extra metrics
kept apart."""

from __future__ import annotations

from kforge_mcp.platforms.base import ProfiledRun
from kforge_mcp.platforms.nvidia import ncu
from kforge_mcp.platforms.nvidia.ncu_metrics import (
    DEFAULT_METRICS,
    PROFILE_METRICS,
    SECTIONS,
    UNREAD_METRICS,
    ncu_args,
)
from kforge_mcp.platforms.nvidia.platform import Ncu

TIME = "gpu__time_duration.sum"


def raw_page(metrics: dict[str, float]) -> str:
    """An ncu raw page of one launch holding ``metrics`` (a header row, a units row, a kernel row)."""
    names = ["ID", "Kernel Name", *metrics]
    units = ["", "", *("ms" if n == TIME else "" for n in metrics)]
    row = ["0", "kernel", *(f"{v:g}" for v in metrics.values())]
    return "\n".join(",".join(f'"{c}"' for c in line) for line in (names, units, row)) + "\n"


def parsed(metrics: dict[str, float]) -> dict:
    return ncu.report_from_raw(raw_page({TIME: 1.0, **metrics})).kernels[0].model_dump()


def test_every_metric_a_profile_asks_for_reaches_the_report_and_the_others_are_the_corpus_alone():
    values = {m: 3.0 + i for i, m in enumerate(DEFAULT_METRICS) if m != TIME}
    alone, every = parsed({}), parsed(values)
    # read: it changes the report alone (a fallback such as dram__throughput) or next to the others (a ratio)
    read = {
        m
        for m in values
        if parsed({m: values[m]}) != alone or parsed({k: v for k, v in values.items() if k != m}) != every
    }
    asked = set(PROFILE_METRICS) - {TIME}
    assert asked <= read, sorted(asked - read)  # nothing asked for that the report drops
    hit_rates = {"l1tex__t_sector_hit_rate.pct", "lts__t_sector_hit_rate.pct"}  # in the report, read by no rule
    assert read - asked == hit_rates
    assert UNREAD_METRICS - hit_rates == set(DEFAULT_METRICS) - read - {TIME}


def test_a_profile_asks_for_no_section(tmp_path):
    commands: list[list[str]] = []

    class Done:
        returncode, stdout, stderr = 0, raw_page({TIME: 1.0}), ""

    run = ProfiledRun(
        workdir=tmp_path,
        iterations=1,
        warmup=1,
        metrics=None,
        timeout_s=10,
        runner=lambda mode, extra: ["python", "-m", "kforge_mcp.profiling.runner", "spec.json"],
        run=lambda cmd, timeout: commands.append(cmd) or Done(),
        keep_raw=lambda name, text: None,
    )
    assert Ncu().capture(run) is not None
    (command,) = commands
    assert "--section" not in command and command[command.index("--metrics") + 1].split(",") == PROFILE_METRICS
    corpus = ncu_args()  # what bench/analysis/capture.py asks for: ncu's sections and every metric
    assert corpus.count("--section") == len(SECTIONS) and corpus[-1].split(",") == DEFAULT_METRICS
