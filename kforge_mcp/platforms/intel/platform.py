"""Intel GPUs: torch's 'xpu' devices. torch.profiler sees their kernels (Intel PTI); unitrace's chrome traces and
--metric-query CSVs load in analyze_profile (kforge does not run unitrace itself); proton sees Triton's kernels;
the peaks are Intel's (peaks.toml); the current device and stream are what a candidate can leave changed."""

from __future__ import annotations

import contextlib
from typing import Any

from kforge_mcp.platforms.base import Platform, Profiler
from kforge_mcp.platforms.formats import ProfileFormat
from kforge_mcp.platforms.intel import unitrace
from kforge_mcp.platforms.intel.advice_terms import VOCABULARY

_streams: dict[int, Any] = {}  # stream_id -> the stream a snapshot found current (to make it current again)


class Unitrace(Profiler):
    name = "unitrace"
    title = "unitrace"
    formats = (
        ProfileFormat(
            "unitrace-trace",
            "unitrace chrome trace JSON",
            detect=lambda text, data: unitrace.is_unitrace_trace(data),
            parse=lambda text, data, name, forwards: unitrace.report_from_chrome(data, name, forwards),
        ),
        ProfileFormat(
            "unitrace-csv",
            "unitrace --metric-query CSV",
            detect=lambda text, data: data is None and unitrace.looks_like_metrics_csv(text[:4096]),
            parse=lambda text, data, name, forwards: unitrace.report_from_metrics_csv(text, name, forwards),
        ),
    )


class Intel(Platform):
    name = "intel"
    title = "Intel"
    kinds = ("xpu",)
    order = 30
    profilers = (Unitrace(),)
    proton = True
    vocabulary = VOCABULARY
    guarded_state = (
        "the current device and stream; torch.xpu and SYCL expose no persisting-L2 set-aside, access policy "
        "window, device limits or cache configuration to read or put back"
    )

    def snapshot(self, index: int) -> dict[str, Any]:
        import torch

        stream = torch.xpu.current_stream(index)
        _streams[stream.stream_id] = stream
        return {"current_device": torch.xpu.current_device(), "current_stream": stream.stream_id}

    def put_back(self, index: int, before: dict[str, Any], changed: set[str]) -> None:
        import torch

        with contextlib.suppress(Exception):  # what stays changed is seen by the snapshot after
            torch.xpu.set_stream(_streams[before["current_stream"]])
        with contextlib.suppress(Exception):
            torch.xpu.set_device(before["current_device"])
