"""ptxas's word that a kernel's wgmma are serialized (C7514/C7515: each waits for the one before) is read from the
kernel's PTX, and the advice names it before feeding the tensor pipe. The PTX here is Triton 3.6's for sm_90a, of a
ConvTranspose2d + Mish kernel whose epilogue read the accumulator inside its flat persistent loop (serialized) and
of the same kernel with a K loop per tile (not); ptxas is the one Triton bundles."""

from __future__ import annotations

import dataclasses
import json
import lzma
from pathlib import Path

import pytest

from kforge_mcp.advice import agent
from kforge_mcp.advice.rules.serialized import SERIALIZED, _mma_serialized
from kforge_mcp.profiling.report import ProfileReport
from kforge_mcp.targets.nvidia import PtxasUnavailable, find_tool, wgmma_serialized

DATA = Path(__file__).resolve().parent / "data"
needs_ptxas = pytest.mark.skipif(find_tool("ptxas", prefer_triton_bundle=True) is None, reason="no ptxas here")


def ptx(name: str) -> str:
    return lzma.decompress((DATA / "ptx" / name).read_bytes()).decode()


@needs_ptxas
def test_ptxas_serialization_is_read_from_the_ptx():
    why = wgmma_serialized(ptx("convt-mish-wgmma-serialized-triton36.ptx.xz"))
    assert why is not None and why.startswith("C7514: non wgmma instructions reading accumulator registers")
    assert wgmma_serialized(ptx("convt-mish-wgmma-overlapped-triton36.ptx.xz")) == ""
    assert wgmma_serialized(".version 8.0\n.target sm_90a\n") == ""  # no wgmma: nothing to ask ptxas
    with pytest.raises(PtxasUnavailable, match="ptxas exited"):  # ptxas could not say: nothing is guessed
        wgmma_serialized("wgmma.mma_async this is not PTX")


@needs_ptxas
def test_ptx_newer_than_tritons_ptxas_is_read_by_the_toolkits():
    """Triton can build with the toolkit's newer ptxas (PTX 9.0 on the H100 machine, CUDA 13): its bundled one
    (PTX 8.7) refuses that PTX, and the toolkit's reads it."""
    from kforge_mcp.targets.nvidia import _triton_bundled, tool_version

    newer = ptx("convt-mish-wgmma-serialized-triton36.ptx.xz").replace(".version 8.7", ".version 9.0", 1)
    toolkit = find_tool("ptxas")
    if not _triton_bundled("ptxas") or toolkit == _triton_bundled("ptxas") or (tool_version("ptxas") or "0") < "13":
        pytest.skip("needs Triton's bundled ptxas and a CUDA 13 toolkit's beside it")
    assert (wgmma_serialized(newer) or "").startswith("C7514")


def test_serialized_mmas_are_named_before_feeding_the_tensor_pipe():
    """#16's fourth step (its tensor pipe 15% busy): with the assembler's word that its wgmma are serialized, the
    advice is to let them overlap, not TMA or tiles; on a convolution it is priced low and to be timed (removing it
    realized -17% to +19% on the H100 conv trajectories)."""
    report = ProfileReport.model_validate(
        json.loads((DATA / "profiles" / "convtranspose2d-mish-split-in-loop-h100.json").read_text())
    )
    conv = max(report.device_kernels(), key=lambda k: k.device_ms)
    before = [r.rule for r in agent.analyze(report.model_copy(deep=True)).recommendations]
    conv.metrics["wgmma_serialized"] = 1.0
    report.notes.append(f"{conv.name}: ptxas serialized its wgmma (C7514: non wgmma instructions reading ...)")
    unranked = report.model_copy(deep=True)  # analyze classifies and ranks in place
    a = agent.analyze(report)
    rules = [r.rule for r in a.recommendations]
    assert "mma_serialized" not in before and "mma_serialized" in rules, rules
    assert "feed_tensor_pipe" not in rules
    named = a.recommendations[rules.index("mma_serialized")]
    assert "its own K loop" in named.action and any("C7514" in str(e.value) for e in named.evidence)
    assert named.priority == "low" and "Uncertain on a convolution" in named.action

    # the convolution's factor is all that lowers it: without it, the kernel gets the price a GEMM's would
    unscaled = _mma_serialized(unranked, dataclasses.replace(SERIALIZED, conv_factor=1.0))[0]
    rounded = 0.02  # expected gains are rounded to 3 decimals
    assert unscaled.expected_gain == pytest.approx(named.expected_gain / SERIALIZED.conv_factor, rel=rounded)
    assert unscaled.expected_gain > 0.3
