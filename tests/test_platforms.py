"""The platforms (kforge_mcp/platforms/): which vendor serves a torch device, their peaks tables and MMA shapes,
the compile checks only where they apply, the formats each vendor reads, and that nothing outside a vendor's
folder names its profiler's metrics, its SM counts or its peak figures, nor does the analysis spell a word of its
vocabulary."""

from __future__ import annotations

import ast
import dataclasses
import math
import re
from collections.abc import Mapping
from pathlib import Path

import pytest

from kforge_mcp import platforms
from kforge_mcp.core.profile import ProfileReport
from kforge_mcp.core.schemas import CompileReport, KernelResources
from kforge_mcp.devices.device import get_device
from kforge_mcp.judge.roofline import mma_granules
from kforge_mcp.platforms.base import KernelNames, load_peak_table
from kforge_mcp.profiling.loader import detect

PACKAGE = Path(__file__).resolve().parents[1] / "kforge_mcp"
DATA = Path(__file__).resolve().parent / "data" / "profiles"
NCU_METRIC = re.compile(r"\b(sm|smsp|dram|l1tex|lts|launch|gpu)__\w")

CUDA = {"__version__": "2.11.0+cu130", "cuda": "13.0", "hip": None, "xpu": None}
ROCM = {"__version__": "2.9.0+rocm6.4", "cuda": None, "hip": "6.4.0", "xpu": None}
XPU = {"__version__": "2.9.0+xpu", "cuda": None, "hip": None, "xpu": "20250101"}


def test_the_vendor_is_told_from_the_device_kind_and_torchs_build():
    assert platforms.identify("cuda", CUDA).name == "nvidia"
    assert platforms.identify("cuda", ROCM).name != "nvidia"  # a ROCm build's 'cuda' devices are AMD's
    assert platforms.identify("xpu", XPU).name == "intel"
    assert platforms.identify("mps", {}).name == "apple"
    assert platforms.identify("cpu", CUDA).name == "cpu"
    assert platforms.UNKNOWN.snapshot(0) == {} and not platforms.UNKNOWN.proton
    # devices are labelled, and a probe says the arch to compile for, only in a vendor's own arch names
    assert platforms.PLATFORMS["nvidia"].arch(9, 0) == "sm_90a" and platforms.PLATFORMS["nvidia"].arch(8, 6) == "sm_86"
    assert platforms.UNKNOWN.arch(9, 4) is None
    # this torch is a CPU build (no hip): a 'cuda' device would be NVIDIA's, whose state the guard reads
    assert get_device("cuda:0").platform.name == "nvidia" and get_device("mps").platform.name == "apple"


def profiled_on(device: str | None, name: str | None, source: str = "torch.profiler") -> str:
    return platforms.profiled_on(ProfileReport(source=source, device=device, device_name=name)).name


def test_a_profile_says_which_vendors_words_it_speaks():
    on_h200 = platforms.profiled_on(ProfileReport(source="torch.profiler", device="cuda:0", device_name="NVIDIA H200"))
    assert on_h200.vocabulary.default_sm_count == 132
    assert profiled_on("sm_90", None) == "nvidia"  # an ncu file's device
    assert profiled_on(None, None, "ncu") == "nvidia" and profiled_on(None, None, "torch.profiler+ncu") == "nvidia"
    assert profiled_on("xpu", None) == "intel" and profiled_on(None, None, "unitrace") == "intel"
    assert profiled_on("mps", "Apple M2") == "apple" and profiled_on("cpu", None) == "cpu"
    assert profiled_on(None, None) == platforms.UNKNOWN.name and not platforms.UNKNOWN.vocabulary.tensor_pipes
    # a compile's platform is the one its arch builds for; a device of a table names the arch it compiles for
    assert platforms.builds_for("sm_90a").name == "nvidia" and platforms.builds_for("gfx942") is platforms.UNKNOWN
    assert platforms.device_arch("H100 SXM") == "sm_90a" and platforms.device_arch("Intel Arc B580") is None
    assert platforms.identify("tpu", {}) is platforms.UNKNOWN and platforms.UNKNOWN.metrics_profiler() is None


def test_every_table_is_whole_and_every_name_resolves():
    for p in platforms.PLATFORMS.values():
        for peaks in p.peaks.devices.values():
            assert peaks.bandwidth > 0 and peaks.flops.get("fp32", 0) > 0 and peaks.source, (p.name, peaks.name)
        for needles, device in p.peaks.aliases:
            assert platforms.table_device(" ".join(needles)) in p.peaks.devices, (p.name, needles, device)
    assert platforms.lookup_peaks("NVIDIA H100 80GB HBM3") == (
        platforms.PLATFORMS["nvidia"].peaks.devices["H100 SXM"],
        None,
    )
    fallback, note = platforms.lookup_peaks("Some Future GPU")
    assert fallback.name == "H100 SXM" and "not in the peaks table: H100 SXM figures used" in note


def test_a_table_that_names_a_device_it_lacks_is_refused(tmp_path):
    bad = tmp_path / "peaks.toml"
    bad.write_text('aliases = [{ match = ["x"], device = "X 1" }]\n[[device]]\nname = "X 2"\nbandwidth = 1e9\n')
    with pytest.raises(ValueError, match="name devices the table lacks: X 1"):
        load_peak_table(bad)
    bad.write_text('[[device]]\nname = "X 2"\nbandwidth = -1e9\n')
    with pytest.raises(ValueError, match="(?s)peaks.toml: not a readable peaks table: .*device.0.bandwidth"):
        load_peak_table(bad)


def test_mma_shapes_are_the_platforms():
    h100, _ = platforms.lookup_peaks("H100 SXM")
    max1550, _ = platforms.lookup_peaks("Intel Data Center GPU Max 1550")
    b580, _ = platforms.lookup_peaks("Intel Arc B580")
    assert mma_granules(h100, "bf16") == (8, 8) and mma_granules(h100, "tf32") == (4, 8)
    assert mma_granules(max1550, "bf16") == (16, 1) and mma_granules(max1550, "3xtf32") == (8, 1)
    assert mma_granules(b580, "tf32") == (1, 1)  # no faster unit than the FMA pipe for it: nothing padded
    assert mma_granules(h100, "fp32") == (1, 1)


def test_compile_checks_run_only_for_the_arch_they_belong_to():
    oversized = [KernelResources(name="k", shared_bytes=300_000)]
    hopper = platforms.compile_diagnostics(CompileReport(ok=True, target="triton", arch="sm_90a", kernels=oversized))
    assert [d.severity for d in hopper] == ["error"] and "232,448" in hopper[0].message
    for arch in (None, "gfx942", "xpu"):
        assert (
            platforms.compile_diagnostics(CompileReport(ok=True, target="triton", arch=arch, kernels=oversized)) == []
        )


def test_each_vendors_files_are_read_by_its_formats():
    keys = {f.key: p.name for p in platforms.PLATFORMS.values() for pr in p.profilers for f in pr.formats}
    assert (
        keys.items()
        >= {
            "ncu-csv": "nvidia",
            "ncu-rep": "nvidia",
            "unitrace-trace": "intel",
            "unitrace-csv": "intel",
            "xctrace": "apple",
        }.items()
    )
    assert detect((DATA / "fused_bias_gelu-triton_naive.ncu-raw.csv").read_text()) == "ncu-csv"
    assert detect((DATA / "fused_bias_gelu-triton_naive.unitrace.json").read_text()) == "unitrace-trace"
    assert detect((DATA / "fused_bias_gelu-triton.proton.hatchet").read_text()) == "proton"
    assert detect((DATA / "fused_bias_gelu-triton.torch-trace.json").read_text()) == "torch-trace"
    assert platforms.metrics_profilers().startswith("Nsight Compute (ncu) on NVIDIA, ")


def _modules(outside: str):
    """(path inside the package, source) of every module outside ``outside``."""
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if not rel.startswith(outside):
            yield rel, path.read_text()


def _numbers(text: str) -> list[tuple[int, float]]:
    return [
        (n.lineno, float(n.value))
        for n in ast.walk(ast.parse(text))
        if isinstance(n, ast.Constant) and type(n.value) in (int, float)
    ]


def test_only_the_nvidia_folder_names_ncu_metrics():
    found = [f"{rel}: {m.group(0)}" for rel, text in _modules("platforms/nvidia/") for m in NCU_METRIC.finditer(text)]
    assert found == []


def test_only_a_vendors_folder_holds_its_peak_figures_and_sm_counts():
    """A figure of a vendor's table as a literal (3.35e12), NVIDIA's also in the units the table used to be
    written in (989.5 TFLOP/s, 3.35 TB/s), or a vendor's default SM count: only in that vendor's folder.
    Powers of ten are units, not figures."""
    found = []
    for p in platforms.PLATFORMS.values():
        figures = {v for d in p.peaks.devices.values() for v in (d.bandwidth, *d.flops.values())}
        figures = {v for v in figures if not math.log10(v).is_integer()}
        scaled = {v / unit for v in figures for unit in (1e9, 1e12) if p.name == "nvidia" and v % unit}
        counts = {p.vocabulary.default_sm_count} - {0}
        for rel, text in _modules(f"platforms/{p.name}/"):
            for line, c in _numbers(text):
                if (
                    any(math.isclose(c, v, rel_tol=1e-9) for v in figures)
                    or (not c.is_integer() and any(math.isclose(c, v, rel_tol=1e-9) for v in scaled))
                    or c in counts
                ):
                    found.append(f"{rel}:{line}: {c:g} ({p.name})")
    assert found == []


_GENERIC_NAMES = {
    f.name: set(getattr(KernelNames(), f.name).pattern.split("|")) for f in dataclasses.fields(KernelNames)
}


def _words(value, field: str = ""):
    """Every word a vocabulary spells: its names, metric keys, units, archs and devices, and the kernel names it
    adds to the generic ones."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, re.Pattern):
        yield from set(value.pattern.split("|")) - _GENERIC_NAMES[field]
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            yield from _words(getattr(value, f.name), f.name)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _words(key)
            yield from _words(item)
    elif isinstance(value, tuple):
        for item in value:
            yield from _words(item)


def test_the_analysis_spells_no_word_of_a_vendors_vocabulary():
    """advice/ reads each vendor's words (pipes, stalls, metric keys, units, archs, library names) from the
    vocabulary of the platform a profile came from: none of them is a string of its own."""
    found = []
    for p in platforms.PLATFORMS.values():
        words = set(_words(p.vocabulary)) - {""}
        for rel, text in _modules(f"platforms/{p.name}/"):
            if rel.startswith("advice/"):
                found += [
                    f"{rel}:{n.lineno}: {n.value!r} ({p.name})"
                    for n in ast.walk(ast.parse(text))
                    if isinstance(n, ast.Constant) and n.value in words
                ]
    assert (
        platforms.PLATFORMS["nvidia"].vocabulary.tensor_pipes
        and platforms.PLATFORMS["intel"].vocabulary.engine_counters.stall
    )
    assert found == []
