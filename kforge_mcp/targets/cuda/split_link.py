"""The split build's link, in two parts, so that a kernel edit links only the small one.

ld reads the symbol tables of torch's libraries (over 400 MB each) for any object linked against
them: 0.4-0.7 s on the GPU hosts, about a third of a kernel edit. Only the bindings (main.o) and
the host functions (host.o) need them, and a kernel edit changes neither. So those two are linked
once into a library of their own, cached by the objects' keys, and each extension links its
kernels (device.o) against a private copy of it, without torch's libraries.

The copy is private because the loader binds a library once: a second extension that needed the
same host library file would find it loaded, its calls to the kernels bound to the first
extension's, and run the old kernels.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

from kforge_mcp.targets.cuda.build_cache import ObjectCache, digest, file_sha, start_logged
from kforge_mcp.targets.cuda.build_plan import Plan

# torch's own libraries in the link flags: the host library needs them, the kernels do not
_TORCH_LIBRARY = re.compile(r"-l(torch|c10)\w*")


class LinkError(Exception):
    """A link failed; ``output`` is the linker's text."""

    def __init__(self, output: str):
        super().__init__("link failed")
        self.output = output


class HostLibrary:
    """main.o and host.o linked against torch's libraries: taken from the cache, or linked in the
    background from the moment both objects exist (while the device unit may still compile)."""

    def __init__(self, plan: Plan, objects: ObjectCache, main: Path, host: Path, work: Path):
        # by the objects' checksums: one object can be kept under two keys (fast_build's made_of)
        self.key = digest("host-library", file_sha(main), file_sha(host), plan.cxx, plan.ldflags)
        self.objects, self.work = objects, work
        self.path = objects.get(self.key)
        self.seconds: float | None = None  # the link's, when this build ran it
        self._proc: subprocess.Popen | None = None
        if self.path is None:
            self._started = time.perf_counter()
            link = [*plan.cxx, str(main), str(host), *plan.ldflags, "-o", "host-library.so"]
            self._proc = start_logged(link, work, work / "host-library.log")

    def wait(self) -> Path:
        """The library's path in the cache, once linked."""
        if self.path is None:
            assert self._proc is not None
            if self._proc.wait() != 0:
                raise LinkError((self.work / "host-library.log").read_text(errors="replace"))
            self.seconds = round(time.perf_counter() - self._started, 2)
            self.path = self.objects.put(self.key, self.work / "host-library.so")
        return self.path


def link_kernels(plan: Plan, device: Path, host_library: Path, private: Path, work: Path) -> float:
    """Link ``work/ext.so`` from the kernels' object and a private copy of the host library at ``private``
    (which the extension names by that path); seconds."""
    started = time.perf_counter()
    shutil.copyfile(host_library, work / "host-library-copy.so")
    (work / "host-library-copy.so").replace(private)
    flags = [f for f in plan.ldflags if not _TORCH_LIBRARY.fullmatch(f)]
    # --no-as-needed: the kernels use nothing of the host library, but the extension must load it (it holds
    # the module's init and the functions that launch the kernels)
    cmd = [*plan.cxx, str(device), "-Wl,--no-as-needed", str(private), *flags, "-o", "ext.so"]
    done = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    if done.returncode != 0:
        raise LinkError(done.stdout + done.stderr)
    return round(time.perf_counter() - started, 2)
