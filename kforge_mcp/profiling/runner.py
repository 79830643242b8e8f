"""The program a worker wraps in a profiler (a platform's, named by the spec's mode, or proton): build the
model the way a worker does, wait for the worker's go where the spec names a file for it (the worker starts this
program early and profiles its own timeline meanwhile: the two never share the device while either measures),
warm it up, then run the profiled forward(s) as that profiler wants them.

    python -m kforge_mcp.profiling.runner SPEC.json

Runs submitted code: only ever started by a worker, in the job's folder, under its limits.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path


def main(spec_path: str) -> None:
    import torch

    from kforge_mcp import platforms, targets
    from kforge_mcp.core.problem import Source, build_models, load_problem, seed_everything
    from kforge_mcp.core.settings import Settings
    from kforge_mcp.judge.timing import sync_device
    from kforge_mcp.targets import get_target

    spec = json.loads(Path(spec_path).read_text())
    settings = Settings.read(spec["settings"])  # the worker's, passed down in the spec
    platforms.use(settings)
    targets.use(settings)
    workdir = Path(tempfile.mkdtemp(prefix="runner-", dir=Path(spec_path).parent))
    device = spec["device"]
    problem = load_problem(Source.from_wire(spec["problem"]), workdir)
    if spec.get("candidate"):
        module = get_target(spec["target"]).load(Source.from_wire(spec["candidate"]), device, workdir).module
        _, model = build_models(problem, module, device, build_reference=False)
    else:
        seed_everything(0)
        model = problem.module.Model(*problem.init_inputs(device)).to(device)
    inputs = problem.make_inputs(7, device)
    if spec.get("go_file") and wait_for_go(Path(spec["go_file"]), float(spec.get("go_timeout_s", 900))) != "go":
        return  # the profile ended before it needed this run
    with torch.no_grad():
        for _ in range(int(spec.get("warmup", 2))):
            model(*inputs)
        sync_device(device)
        if spec["mode"] == "proton":  # Triton's own profiler, every vendor's
            import triton.profiler as proton

            proton.start(spec["proton_name"], hook="triton")
            for _ in range(int(spec.get("iterations", 5))):
                model(*inputs)
            sync_device(device)
            proton.finalize()
            return
        profiler = platforms.profiler(spec["mode"])
        if profiler is None:
            raise SystemExit(f"no platform has a profiler named {spec['mode']!r}")
        profiler.in_runner(lambda: model(*inputs), lambda: sync_device(device), spec)


def wait_for_go(path: Path, timeout_s: float) -> str:
    """What the worker wrote to ``path`` ('go' or 'stop'), once it exists; 'stop' after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return path.read_text().strip()
        time.sleep(0.01)
    return "stop"


if __name__ == "__main__":
    main(sys.argv[1])
