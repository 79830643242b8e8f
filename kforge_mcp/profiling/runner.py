"""The program a worker wraps in a profiler (a platform's, named by the spec's mode, or proton): build the
model the way a worker does, wait for the worker's go where the spec names a file for it (the worker starts this
program early and profiles its own timeline meanwhile: the two never share the device while either measures),
warm it up, then run the profiled forward(s) as that profiler wants them.

    python -m kforge_mcp.profiling.runner SPEC.json
    python -m kforge_mcp.profiling.runner --spare FOLDER IDLE_S WORKER_PID DEVICE   (waits for a spec: spare.py)

Runs submitted code: only ever started by a worker, in the job's folder, under its limits.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    times = Times(spec.get("times_file"))
    import torch

    from kforge_mcp import platforms, targets
    from kforge_mcp.core.problem import Source, build_models, load_problem, seed_everything
    from kforge_mcp.core.settings import Settings
    from kforge_mcp.judge.timing import sync_device
    from kforge_mcp.targets import get_target

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
    inputs = problem.make_inputs(7, device, on_device=True)
    times.mark("ready")
    if spec.get("go_file") and wait_for_go(Path(spec["go_file"]), float(spec.get("go_timeout_s", 900))) != "go":
        return  # the profile ended before it needed this run
    times.mark("go")
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
    times.mark("done")


class Times:
    """Wall-clock moments of this program (ready: model built; go; done: profiled), written to the spec's
    times_file for the worker's phases; nothing where the spec names none."""

    def __init__(self, path: str | None):
        self.path = Path(path) if path else None
        self.seen: dict[str, float] = {}

    def mark(self, name: str) -> None:
        if self.path is not None:
            self.seen[name] = time.time()
            self.path.write_text(json.dumps(self.seen))


def wait_for_go(path: Path, timeout_s: float) -> str:
    """What the worker wrote to ``path`` ('go' or 'stop'), once it exists; 'stop' after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return path.read_text().strip()
        time.sleep(0.01)
    return "stop"


def spare(folder: Path, idle_s: float, worker: int, device: str) -> None:
    """Launched ahead of its profile (spare.py): import what every run needs and make ``device``'s context, then
    wait for the worker to name the spec in ``folder``; exit when none comes within ``idle_s`` or the worker process
    is gone."""
    import torch

    if device.startswith("cuda"):
        torch.empty(1, device=device)  # the context (and a profiler's injection on its first call) made while waiting

    from kforge_mcp import platforms, targets  # noqa: F401
    from kforge_mcp.core import problem, settings  # noqa: F401
    from kforge_mcp.profiling.spare import SPEC_FILE

    deadline, next_check = time.monotonic() + idle_s, time.monotonic() + 1.0
    while not (folder / SPEC_FILE).exists():
        now = time.monotonic()
        if now >= next_check:  # once a second: is the worker still there?
            next_check = now + 1.0
            if not _alive(worker):
                deadline = now
        if now >= deadline:
            shutil.rmtree(folder, ignore_errors=True)  # nobody will hand it a spec: leave nothing behind
            return
        time.sleep(0.005)
    spec_path = (folder / SPEC_FILE).read_text().strip()
    os.chdir(Path(spec_path).parent)  # the job's folder, as for a program launched for it
    main(spec_path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # no signal sent: only whether the process still exists
    except ProcessLookupError:
        return False
    return True


if __name__ == "__main__":
    if sys.argv[1] == "--spare":
        spare(Path(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        main(sys.argv[1])
