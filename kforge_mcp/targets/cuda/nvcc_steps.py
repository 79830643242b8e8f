"""nvcc's own steps for one .cu, with its two front ends side by side.

nvcc runs seven steps in turn: the host preprocessor and cudafe++ (the host side), the device
preprocessor, cicc, ptxas and fatbinary (the device side), then the host compiler over both.
The two sides only meet at the last step, and through the module id, a name cudafe++ writes and
cicc reads; written first, the sides run at once, and a kernel edit's device unit compiles in
about two thirds of nvcc's time. The steps are nvcc's own (``--dryrun``), so the object is
nvcc's byte for byte given the same module id. Where the steps are not the seven expected
(another toolkit, more than one arch, relocatable code), nvcc runs as usual.

The last step, the host compiler over cudafe++'s output, parses the host side of every header again
(0.7 s of a 2.3 s kernel edit with cub). A kernel edit leaves that output as it was but for the
kernels' bodies (kept there under ``#if 0``) and line markers, so its object is kept by that output's
key, and an edit whose key is known takes the kept object with the new fatbinary put in its
``.nv_fatbin`` section (objcopy): the section that holds the fatbinary and nothing else. For that
the module id, which cudafe++ writes into the output, is one per unit name, not per source.
"""

from __future__ import annotations

import functools
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


def module_id(stem: str) -> str:
    """A module id in nvcc's form, one per unit name: it names the unit's anonymous namespace, which only
    has to be unique among the units linked into one library (each extension has one unit)."""
    h = hashlib.sha256(f"kforge:{stem}".encode()).hexdigest()
    return f"_{h[:8]}_{len(stem)}_{stem}_{h[8:16]}"


# cudafe++'s host output as the host compiler reads it, without what cannot change the host object: line
# markers (the object has no debug information; __LINE__ is expanded before cudafe++), the kernels' bodies
# under #if 0, and the layout cudafe++ gives lines to keep them in step with the source (blank lines, a
# statement split over several). Lines are trimmed and joined by one space (a literal never spans lines in
# cudafe++'s output), directives kept on lines of their own. In the stub file, the number cudafe++ gives the
# registration's parameter (__T<n>) counts the source's entities, so it goes too.
_HOST_TEXT = (
    "awk 'skip { if ($0 ~ /^#if/) skip++; else if ($0 ~ /^#endif/) skip--; next }"
    " /^#if 0[ \\t]*$/ { skip = 1; next } /^# [0-9]+/ || /^#line / { next }"
    ' { gsub(/^[ \\t]+|[ \\t]+$/, "") } $0 == "" { next } /^#/ { printf "\\n%s\\n", $0; next }'
    ' { printf "%s ", $0 }\''
)


def _reuse_host_object(steps: list[str], keep: Path, objects: Path, salt: str) -> str | None:
    """Bash that takes the host object kept for this host output with the new fatbinary in it, or runs the
    last step and keeps its object; None where the steps do not name the files this needs."""
    gen = re.search(r'--gen_c_file_name "([^"]+)"', steps[1])
    stub = re.search(r'--stub_file_name "([^"]+)"', steps[1])
    fatbin = re.search(r'--create="([^"]+)"', steps[5])
    embedded = re.search(r'--embedded-fatbin="([^"]+)"', steps[5])
    out = re.search(r'-o "([^"]+)"\s*$', steps[6])
    tools = all(shutil.which(t) for t in ("awk", "sha256sum", "objcopy"))
    if not (gen and stub and fatbin and embedded and out and tools) or " -g" in steps[6]:
        return None
    stub_path = Path(gen.group(1)).parent / Path(stub.group(1)).name
    last = steps[6].replace(str(keep), "KEEP")  # the kept folder's path is each build's own
    salt = hashlib.sha256(f"{salt}\0{last}".encode()).hexdigest()
    q = shlex.quote
    kept, obj = f"{q(str(objects))}/nvcc-host-$key.o", q(out.group(1))
    return "\n".join(
        [
            f"key=$( {{ echo {salt}; {_HOST_TEXT} {q(gen.group(1))}; {_HOST_TEXT} {q(str(stub_path))} | sed 's/__T[0-9]*/__T/g';"
            f" grep -v '^\".quad' {q(embedded.group(1))} | sed 's/fatbinData\\[[0-9]*\\]/fatbinData[]/'; }}"
            " | sha256sum | cut -c1-40 )",
            f'if [ -f {kept} ] && [ "$(sha256sum < {kept} | cut -d" " -f1)" = "$(cat {kept}.sha256 2>/dev/null)" ] \\',
            f"  && objcopy --update-section .nv_fatbin={q(fatbin.group(1))} {kept} {obj}.kept \\",
            f"  && mv -f {obj}.kept {obj}; then touch {obj}.host-kept",
            "else",
            f"  {steps[6]} || exit $?",
            f"  cp {obj} {kept}.$$ && mv -f {kept}.$$ {kept}"
            f" && sha256sum < {kept} | cut -d' ' -f1 > {kept}.sha256.$$ && mv -f {kept}.sha256.$$ {kept}.sha256",
            "fi",
        ]
    )


def side_by_side(cmd: list[str], source: Path, objects: Path | None = None, salt: str = "") -> list[str] | None:
    """A command (bash) that runs ``cmd``'s nvcc steps with the two sides at once; None where nvcc must
    run as usual. Its output is nvcc's: the host side's, then the device side's, stopping where nvcc
    would stop. ``objects``: where host objects are kept by their host output's key (and ``salt``, what
    else they depend on: the toolchain); the object then says it took one by a ``.host-kept`` file beside it."""
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
    id_file.write_text(module_id(source.name.replace(".", "_")))
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
            (objects and _reuse_host_object(steps, keep, objects, salt)) or steps[6],
        ]
    )
    path = cwd / f"{source.stem}-steps.sh"
    path.write_text(script + "\n")
    return [bash, str(path)]


@functools.lru_cache(maxsize=4)
def visible_kernel_flags(nvcc: tuple[str, ...]) -> tuple[str, ...]:
    """nvcc's flags that keep the kernels' host stubs and the device variables visible outside the library
    that holds device.o: the host code calls them from a library of its own (split_link.py), and since
    CUDA 13 nvcc hides them by default."""
    try:
        usage = subprocess.run([*nvcc, "--help"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    flag = "-device-entity-has-hidden-visibility"
    return (f"{flag}=false",) if flag in usage else ()
