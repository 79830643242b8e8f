"""A metrics profiler's program launched ahead of the profile that will use it. Under Nsight Compute the profiled
program spent 5.4-8.6 s (an H100) from its launch to its model built, most of it the profiler's start, Python and
torch importing under its injection, and the device's context, against 1.9-3.5 s for the forwards and the replays.
A worker keeps one such program waiting, launched with the command the last capture used: the next capture whose
command is the same but for its spec hands it the spec and reads its output as if it had launched it. A program
idle for IDLE_S, or whose worker process is gone, exits by itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

IDLE_S = 600.0  # a spare nobody took within this exits: the next capture launches its own
SPEC_FILE = "spec"  # the worker writes the spec's path here: the spare's go to load it


def runs_the_runner(command: list[str]) -> bool:
    """A command that ends in the profiled program (profiling/runner.py) and its spec."""
    return len(command) >= 3 and command[-3:-1] == ["-m", "kforge_mcp.profiling.runner"]


def spec_device(command: list[str]) -> str:
    """The device a runner's command profiles on, from its spec."""
    try:
        return str(json.loads(Path(command[-1]).read_text()).get("device", "cpu"))
    except (OSError, ValueError):
        return "cpu"


def spare_command(command: list[str], folder: Path, device: str) -> list[str] | None:
    """The command of a spare for ``command`` (a runner's, its spec last): the spec replaced by ``--spare`` and what
    the spare prepares (``device``, the spec's, whose context it makes while it waits)."""
    if not runs_the_runner(command):
        return None
    return [*command[:-1], "--spare", str(folder), str(IDLE_S), str(os.getpid()), device]


class SpareProgram:
    """One launched program waiting for its spec, and the command it stands for."""

    def __init__(self, command: list[str], env: dict[str, str], device: str | None = None):
        self.command, self.device = command, device or spec_device(command)
        self.folder = Path(tempfile.mkdtemp(prefix="kforge-spare-"))
        launch = spare_command(command, self.folder, self.device)
        if launch is None:
            raise ValueError("not a runner's command")
        self.proc = subprocess.Popen(
            launch,
            cwd=self.folder,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.launched = time.monotonic()

    def stands_for(self, command: list[str], device: str | None = None) -> bool:
        """Still waiting, and launched for this command but its spec, on the device that spec names (or ``device``)."""
        waiting = self.proc.poll() is None and time.monotonic() - self.launched < IDLE_S - 5
        return waiting and self.command[:-1] == command[:-1] and self.device == (device or spec_device(command))

    def take(self, command: list[str], timeout: float) -> subprocess.CompletedProcess:
        """Hand the spare ``command``'s spec and wait for it as for a program launched with ``command``."""
        tmp = self.folder / (SPEC_FILE + ".tmp")
        tmp.write_text(command[-1])
        os.replace(tmp, self.folder / SPEC_FILE)
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.close()
            raise
        shutil.rmtree(self.folder, ignore_errors=True)
        return subprocess.CompletedProcess(command, self.proc.returncode, out, err)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
        shutil.rmtree(self.folder, ignore_errors=True)


class Spares:
    """The worker's spare: ``hand`` gives a command to the spare where one stands for it, and ``leave`` launches
    one for the next capture with the same command."""

    def __init__(self) -> None:
        self.spare: SpareProgram | None = None

    def hand(self, command: list[str], timeout: float) -> subprocess.CompletedProcess | None:
        """The spare's run of ``command`` where it stands for it; else None (and a spare for another command
        closed): the caller launches the command itself."""
        spare, self.spare = self.spare, None
        if spare is not None and spare.stands_for(command):
            return spare.take(command, timeout)
        if spare is not None:
            spare.close()
        return None

    def leave(self, command: list[str], env: dict[str, str], device: str | None = None) -> None:
        """A spare for the next capture with this command (none where it is not a runner's); ``device``: where its
        spec is not written yet (a spare launched before any profile), the device it makes its context on."""
        if not runs_the_runner(command):
            return
        if self.spare is not None and self.spare.stands_for(command, device):
            return  # one waits for it already
        self.close()
        self.spare = SpareProgram(command, env, device)

    def close(self) -> None:
        if self.spare is not None:
            self.spare.close()
            self.spare = None
