"""nvcc's steps with the host and device sides at once (targets/cuda/nvcc_steps.py), against the real nvcc:
the same object byte for byte given the same module id, the same diagnostics, nvcc itself where its
steps are not the seven known, and a kernel edit's object from the kept host object the same as nvcc's."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from kforge_mcp.targets.cuda import nvcc_steps
from kforge_mcp.targets.nvidia import find_tool

NVCC = find_tool("nvcc")
pytestmark = pytest.mark.skipif(NVCC is None, reason="needs nvcc")

# what a candidate's device unit holds: a template, an anonymous namespace (named through the module id),
# a __constant__ table, half types, and more than one kernel
KERNELS = r"""
#include <cuda_fp16.h>
__constant__ float taps[4] = {0.25f, 0.5f, 0.75f, 1.0f};
namespace {
__global__ void scale(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= taps[i % 4]; }
}
template <typename T>
__global__ void add(const T* a, const T* b, T* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
template __global__ void add<float>(const float*, const float*, float*, int);
template __global__ void add<__half>(const __half*, const __half*, __half*, int);
void launch(float* x, int n) { scale<<<(n + 255) / 256, 256>>>(x, n); }
"""


def command(*extra: str) -> list[str]:
    assert NVCC is not None
    return [NVCC, "--expt-relaxed-constexpr", "-Xcompiler", "-fPIC", "-std=c++17", *extra, "-c", "device.cu"]


ONE_ARCH = "-gencode=arch=compute_90a,code=sm_90a"


def run_side_by_side(cmd: list[str], source: Path) -> subprocess.CompletedProcess:
    script = nvcc_steps.side_by_side(cmd, source)
    assert script is not None, "nvcc's steps were not the seven known"
    return subprocess.run(script, cwd=source.parent, capture_output=True, text=True)


def test_the_object_is_nvccs_own_given_its_module_id(tmp_path, monkeypatch):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for d in (ours, theirs):
        d.mkdir()
        (d / "device.cu").write_text(KERNELS)
    subprocess.run([*command(ONE_ARCH), "-o", "device.o", "--keep", "--keep-dir", str(theirs)], cwd=theirs, check=True)
    their_id = (theirs / "device.module_id").read_text()
    monkeypatch.setattr(nvcc_steps, "module_id", lambda stem: their_id)
    done = run_side_by_side([*command(ONE_ARCH), "-o", "device.o"], ours / "device.cu")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (ours / "device.o").read_bytes() == (theirs / "device.o").read_bytes()
    assert not (ours / "device-steps").exists(), "nvcc's intermediates are left behind"


def test_a_module_id_in_nvccs_form_names_the_anonymous_namespace(tmp_path):
    (tmp_path / "device.cu").write_text(KERNELS)
    done = run_side_by_side([*command(ONE_ARCH), "-o", "device.o"], tmp_path / "device.cu")
    assert done.returncode == 0, done.stdout + done.stderr
    symbols = subprocess.run(["nm", str(tmp_path / "device.o")], capture_output=True, text=True, check=True).stdout
    own = nvcc_steps.module_id("device_cu")
    assert re.fullmatch(r"_[0-9a-f]{8}_9_device_cu_[0-9a-f]{8}", own)
    assert own in symbols  # the host stub of the anonymous-namespace kernel is named by it


@pytest.mark.parametrize(
    "broken, side",
    [
        ("__global__ void k(float* x) { x[0] = undeclared_name; }", "host and device"),
        ('__global__ void k(float* x) { asm volatile("not.an.instruction;"); }', "ptxas"),
        ("void host_only() { int y = no_such_host_name; }\n__global__ void k(float* x) { x[0] = 1; }", "host"),
    ],
)
def test_a_failing_unit_says_what_nvcc_says(tmp_path, broken, side):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for d in (ours, theirs):
        d.mkdir()
        (d / "device.cu").write_text(broken + "\n")
    nvcc = subprocess.run([*command(ONE_ARCH), "-o", "device.o"], cwd=theirs, capture_output=True, text=True)
    done = run_side_by_side([*command(ONE_ARCH), "-o", "device.o"], ours / "device.cu")
    assert nvcc.returncode != 0 and done.returncode != 0, side
    # ptxas names its input, an intermediate whose path is nvcc's own choice (a temp file, ours kept apart)
    said = [re.sub(r"\S+\.ptx\b", "X.ptx", p.stdout + p.stderr) for p in (done, nvcc)]
    assert said[0] == said[1], side
    assert not (ours / "device.o").exists()


@pytest.mark.parametrize(
    "flags",
    [
        ("-gencode=arch=compute_90a,code=sm_90a", "-gencode=arch=compute_80,code=sm_80"),  # two archs
        (ONE_ARCH, "-rdc=true"),  # relocatable device code: nvcc's steps differ
    ],
)
def test_other_steps_leave_nvcc_to_run_them(tmp_path, flags):
    (tmp_path / "device.cu").write_text(KERNELS)
    assert nvcc_steps.side_by_side([*command(*flags), "-o", "device.o"], tmp_path / "device.cu") is None
    assert not (tmp_path / "device-steps").exists()


# a kernel edit: more lines and more code in a kernel's body (a bigger fatbinary), nothing the host sees
BODY_EDIT = KERNELS.replace(
    "x[i] *= taps[i % 4];",
    "\n        for (int k = 0; k < n; ++k)\n            x[i] = x[i] * taps[(i + k) % 4] + sinf(x[i]);\n",
)


def built(tmp_path: Path, name: str, text: str, objects: Path | None) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "device.cu").write_text(text)
    script = nvcc_steps.side_by_side([*command(ONE_ARCH), "-o", "device.o"], folder / "device.cu", objects, "salt")
    assert script is not None
    done = subprocess.run(script, cwd=folder, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return folder / "device.o"


def contents(obj: Path) -> str:
    """Every section's bytes, the relocations and the symbols: what the linker takes from an object."""
    dumps = [
        subprocess.run([*tool, str(obj)], capture_output=True, text=True, check=True).stdout
        for tool in (["objdump", "-s"], ["readelf", "-rsW"])
    ]
    return "\n".join(d.replace(str(obj), "OBJ") for d in dumps)


def kept(obj: Path) -> bool:
    return obj.with_name(obj.name + ".host-kept").exists()


def test_a_kernel_edit_takes_the_kept_host_object_with_its_own_kernels_in_it(tmp_path):
    objects = tmp_path / "objects"
    objects.mkdir()
    first = built(tmp_path, "first", KERNELS, objects)
    assert not kept(first) and len(list(objects.glob("nvcc-host-*.o"))) == 1
    edit = built(tmp_path, "edit", BODY_EDIT, objects)
    assert kept(edit), "the host output did not change, yet its object was compiled again"
    nvccs = built(tmp_path, "nvcc", BODY_EDIT, None)  # all seven steps, the same module id
    assert not kept(nvccs)
    assert contents(edit) == contents(nvccs)
    assert contents(edit) != contents(first)  # the new kernels (a bigger fatbinary) are in it


@pytest.mark.parametrize(
    "change",
    [
        KERNELS + "__global__ void extra(float* y) { y[0] = 1; }\n",  # one kernel more: a stub more
        KERNELS.replace("scale(float* x, int n)", "scale(float* x, long n)"),  # a signature the stub passes
        KERNELS.replace("{0.25f, 0.5f, 0.75f, 1.0f}", "{0.25f, 0.5f, 0.75f, 2.0f}") + "float host_side = 1;\n",
    ],
)
def test_an_edit_the_host_sees_compiles_its_host_object(tmp_path, change):
    objects = tmp_path / "objects"
    objects.mkdir()
    built(tmp_path, "first", KERNELS, objects)
    edit = built(tmp_path, "edit", change, objects)
    assert not kept(edit)
    assert contents(edit) == contents(built(tmp_path, "nvcc", change, None))


def test_a_kept_host_object_that_fails_its_checksum_is_compiled_again(tmp_path):
    objects = tmp_path / "objects"
    objects.mkdir()
    built(tmp_path, "first", KERNELS, objects)
    (kept_object,) = objects.glob("nvcc-host-*.o")
    kept_object.write_bytes(kept_object.read_bytes()[:100])  # cut short, as by a crash
    edit = built(tmp_path, "edit", BODY_EDIT, objects)
    assert not kept(edit)
    assert contents(edit) == contents(built(tmp_path, "nvcc", BODY_EDIT, None))
    assert kept(built(tmp_path, "again", BODY_EDIT, objects))  # the object compiled again was kept
