"""nvcc's own steps for one .cu, with its two front ends side by side.

nvcc runs seven steps in turn: the host preprocessor and cudafe++ (the host side), the device
preprocessor, cicc, ptxas and fatbinary (the device side), then the host compiler over both.
The two sides only meet at the last step, and through the module id, a name cudafe++ writes and
cicc reads; written first, the sides run at once, and a kernel edit's device unit compiles in
about two thirds of nvcc's time. The steps are nvcc's own (``--dryrun``), so the object is
nvcc's byte for byte given the same module id. Where the steps are not the seven expected
(another toolkit, more than one arch, relocatable code), nvcc runs as usual.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import shutil
import subprocess
from pathlib import Path

_ASSIGNMENT = re.compile(r"^(\w+)=(.*)$")
# what nvcc's steps read from its settings: where cicc and the tools are, and libdevice
_STEP_ENV = ("PATH", "LD_LIBRARY_PATH", "CICC_PATH", "NVVMIR_LIBRARY_DIR")
GEN_MODULE_ID = "--gen_module_id_file "
_MODULE_ID_FILE = re.compile(r'--module_id_file_name "([^"]+)"')


def nvcc_steps(cmd: list[str], cwd: Path, keep: Path) -> tuple[dict[str, str], list[str], Path] | None:
    """nvcc's settings and steps for ``cmd`` run in ``cwd`` (intermediates kept in ``keep``), and the module
    id's file; None when they are not the seven this module knows."""
    try:
        dry = subprocess.run(
            [*cmd, "--dryrun", "--keep", "--keep-dir", str(keep)], cwd=cwd, capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if dry.returncode != 0:
        return None
    lines = [ln[3:] for ln in dry.stderr.splitlines() if ln.startswith("#$ ")]
    env = {m.group(1): m.group(2) for ln in lines if (m := _ASSIGNMENT.match(ln)) and m.group(1) in _STEP_ENV}
    steps = [ln for ln in lines if not _ASSIGNMENT.match(ln)]
    try:
        tools = [Path(shlex.split(s.replace('"$CICC_PATH/', '"'))[0]).name for s in steps]
    except (ValueError, IndexError):  # quoting this module does not read
        return None
    expected = [None, "cudafe++", None, "cicc", "ptxas", "fatbinary", None]
    if len(steps) != 7 or any(want and tool != want for tool, want in zip(tools, expected)):
        return None
    if " -E " not in steps[0] or " -E " not in steps[2] or " -c " not in steps[6] or GEN_MODULE_ID not in steps[1]:
        return None
    if "--device-c" in steps[1]:  # relocatable code: the module id must be unique among the units linked
        return None
    written = _MODULE_ID_FILE.search(steps[1])
    read = _MODULE_ID_FILE.search(steps[3])
    if written is None or read is None or written.group(1) != read.group(1):
        return None
    return env, steps, Path(written.group(1))


def module_id(source: bytes, stem: str) -> str:
    """A module id in nvcc's form, from the source (one per translation unit: the extension has one)."""
    h = hashlib.sha256(source).hexdigest()
    return f"_{h[:8]}_{len(stem)}_{stem}_{h[8:16]}"


def side_by_side(cmd: list[str], source: Path) -> list[str] | None:
    """A command (bash) that runs ``cmd``'s nvcc steps with the two sides at once; None where nvcc must
    run as usual. Its output is nvcc's: the host side's, then the device side's, stopping where nvcc
    would stop."""
    bash = shutil.which("bash")
    if bash is None:
        return None
    cwd = source.parent
    keep = cwd / f"{source.stem}-steps"  # nvcc's intermediates, removed when the steps end
    found = nvcc_steps(cmd, cwd, keep)  # a dry run: the folder need not exist yet
    if found is None:
        return None
    env, steps, id_file = found
    keep.mkdir(exist_ok=True)
    id_file.write_text(module_id(source.read_bytes(), source.name.replace(".", "_")))
    host = [steps[0], steps[1].replace(GEN_MODULE_ID, "")]
    device = steps[2:6]
    keep_dir = shlex.quote(keep.name)
    script = "\n".join(
        [
            *(f"export {name}={shlex.quote(value)}" for name, value in env.items()),
            f"trap 'rm -rf {keep_dir}' EXIT",
            f"( {' && '.join(host)} ) > {keep_dir}/host.log 2>&1 & host=$!",
            f"( {' && '.join(device)} ) > {keep_dir}/device.log 2>&1; device=$?",
            "wait $host; host=$?",
            f"cat {keep_dir}/host.log; [ $host -eq 0 ] || exit $host",
            f"cat {keep_dir}/device.log; [ $device -eq 0 ] || exit $device",
            steps[6],
        ]
    )
    path = cwd / f"{source.stem}-steps.sh"
    path.write_text(script + "\n")
    return [bash, str(path)]
