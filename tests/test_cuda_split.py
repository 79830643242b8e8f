"""The split CUDA build's source cut (cuda_split.py) and its units, compiled by the real nvcc and g++.

Linking and running need a CUDA build of torch (tests/test_gpu_nvidia.py and
bench/cuda_build_time.py on the H100); here each unit is compiled as the split build compiles it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sysconfig
import time
from pathlib import Path

import pytest

from kforge_mcp.targets.cuda.preludes import candidate_errors
from kforge_mcp.targets.cuda.split import CannotSplit, lower_launches, split

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples/candidates").glob("*/cuda.py"))


def cuda_source(path: Path) -> str:
    return re.search(r'cuda_source = r?"""(.*?)"""', path.read_text(), re.S).group(1)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.parent.name)
def test_split_keeps_lines_and_separates_units(path):
    code = cuda_source(path)
    units = split(code)
    assert units.host.count("\n") == code.count("\n") == units.device.count("\n")  # #line mapping holds
    assert units.kernels
    assert "<<<" not in units.host and "__cudaPushCallConfiguration(" in units.host
    assert "__global__" not in units.host and "threadIdx" not in units.host
    assert "torch/extension.h" not in units.device and "torch::" not in units.device
    for k in units.kernels:
        assert re.search(rf"__global__[^;{{]*\b{k}\s*\(", units.device)
        assert re.search(rf"\bvoid\s+{k}\s*\([^)]*\);", units.host)  # the stub the launch calls


def test_launch_lowering_matches_nvcc_form():
    code = "void f(int n, cudaStream_t s) {\n  k<<<dim3((n + 255) / 256), 256, 0, s>>>(a(1, 2), n);\n}\n"
    assert lower_launches(code) == (
        "void f(int n, cudaStream_t s) {\n"
        "  (__cudaPushCallConfiguration(dim3((n + 255) / 256), 256, 0, s) ? (void)0 : k(a(1, 2), n));\n}\n"
    )


@pytest.mark.parametrize(
    "code, why",
    [
        ("__managed__ int c;\n__global__ void k() {}\nvoid f() { c = 1; }\n", "'c'"),
        ("__constant__ float a[2], b[2];\n__global__ void k() {}\nvoid f() { cudaMemcpyToSymbol(a, 0, 4); }\n", "'a'"),
        ("__global__ void k() {}\nPYBIND11_MODULE(m, x) {}\n", "own module"),
        ("void f() {}\n", "no kernel"),
    ],
)
def test_what_it_cannot_cut_faithfully_is_refused(code, why):
    with pytest.raises(CannotSplit, match=why):
        split(code)


def test_template_kernels_are_declared_in_the_host_and_instantiated_as_the_host_calls_them():
    code = (
        "template <typename scalar_t, int V>\n__global__ void k(const scalar_t* x, scalar_t* y, int n) {}\n"
        "void f(float* x, int n) {\n  k<float, 4><<<(n + 255) / 256, 256, 0, s>>>(x, x, n);\n}\n"
    )
    units = split(code)
    assert units.templates == ["k"] and units.host.count("\n") == code.count("\n")
    assert "template <typename scalar_t, int V>\n void k(const scalar_t* x, scalar_t* y, int n);" in units.host
    assert "(__cudaPushCallConfiguration((n + 255) / 256, 256, 0, s) ? (void)0 : k<float, 4>(x, x, n))" in units.host
    symbols = ["void k<float, 4>(float const*, float*, int)", "cudaLaunchKernel", "void kk<int>(int)", "at::empty(...)"]
    assert units.instantiations(symbols) == ["template __global__ void k<float, 4>(float const*, float*, int);"]
    assert split(code.replace("template <typename scalar_t, int V>\n", "").replace("<float, 4>", "")).templates == []


def test_functions_marked_with_c10s_macros_go_where_they_run():
    code = "C10_DEVICE float d(float v) { return v; }\nC10_HOST_DEVICE float b(float v) { return v; }\n"
    code += "__global__ void k(float* x) { x[0] = d(b(x[0])); }\nvoid f(float* x) { b(1.0f); k<<<1, 1>>>(x); }\n"
    units = split(code)
    assert "float d(" in units.device and "float d(" not in units.host
    assert "float b(" in units.device and "float b(" in units.host


def test_a_constant_table_the_host_fills_is_the_variable_the_device_unit_registers():
    code = (
        "__constant__ float coeffs[8];\n__global__ void k(float* y) { y[0] = coeffs[1]; }\n"
        "void f(const float* c) { cudaMemcpyToSymbol(coeffs, c, sizeof(coeffs)); }\n"
    )
    units = split(code)
    assert units.host.count("\n") == units.device.count("\n") == code.count("\n")
    host_decl, device_decl = units.host.splitlines()[0], units.device.splitlines()[0]
    assert host_decl == (
        'extern "C" void* kforge_symbol_0_coeffs(); '
        "static float (&coeffs)[8] = *static_cast<float (*)[8]>(kforge_symbol_0_coeffs());"
    )
    assert (
        device_decl
        == '__constant__ float coeffs[8]; extern "C" void* kforge_symbol_0_coeffs() { return (void*)&coeffs; }'
    )


def test_the_device_unit_gets_what_torch_headers_give_kernels_where_they_use_it():
    """Under nvcc torch's headers bring cuda_fp16.h, cuda_bf16.h and c10's macros to a load_inline source;
    the device unit, without torch's headers, includes each only where its kernels use it (each costs the
    rebuild after a kernel edit)."""
    from kforge_mcp.targets.cuda.preludes import device_prelude

    assert device_prelude("__global__ void k(float* x) { x[0] = 1.0f; }") == ""
    half = device_prelude("C10_DEVICE __half f(__half v) { return v; }")
    assert "<cuda_fp16.h>" in half and "<c10/macros/Macros.h>" in half
    assert "<cuda_bf16.h>" not in half and "<c10/util/Half.h>" not in half
    assert "<cuda_bf16.h>" in device_prelude("__global__ void k(__nv_bfloat16* x) {}")
    dispatched = device_prelude("template __global__ void k<c10::Half>(c10::Half const*, int);")
    assert "<c10/util/Half.h>" in dispatched and "using c10::Half;" in dispatched


def test_device_errors_blamed_on_the_candidate_only_when_they_are_its_own():
    own = 'cand.py(12): error: identifier "blockIdy" is undefined\n'
    torch_name = 'cand.py(12): error: name followed by "::" must be a class or namespace name: at\n'
    elsewhere = "/tmp/x/device.cu(3): error: something\n"
    assert candidate_errors(own, "cand.py")
    assert not candidate_errors(torch_name, "cand.py")
    assert not candidate_errors(elsewhere, "cand.py")


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.parent.name)
def test_device_unit_compiles_without_torch_headers(path, tmp_path):
    (tmp_path / "device.cu").write_text(
        "#include <cuda.h>\n#include <cuda_runtime.h>\n" + split(cuda_source(path)).device
    )
    run = subprocess.run(
        ["nvcc", "-c", "-gencode=arch=compute_90a,code=sm_90a", "device.cu", "-o", "device.o"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    syms = subprocess.run(["nm", "-C", "device.o"], cwd=tmp_path, capture_output=True, text=True).stdout
    for k in split(cuda_source(path)).kernels:  # the host stubs the host unit's launches call
        assert re.search(rf" T {k}\(", syms), syms


@needs_nvcc
@pytest.mark.slow
def test_host_unit_type_checks_with_torch_headers(tmp_path):
    """The lowered launches call the stubs with the kernels' own parameter types (g++, torch's headers),
    with the lean header the split build tries first (torch/types.h in place of torch/extension.h)."""
    from kforge_mcp.targets.cuda.preludes import _EXTENSION_INCLUDE, LEAN_HOST_HEADER, LEAN_PRELUDE
    from kforge_mcp.targets.cuda.target import torch_include_dirs

    path = ROOT / "examples/candidates/gemm_bias_relu/cuda.py"
    host = split(cuda_source(path)).host
    lean = _EXTENSION_INCLUDE.sub(LEAN_HOST_HEADER, host)
    assert lean != host and lean.count("\n") == host.count("\n") and "torch/extension.h" not in LEAN_PRELUDE
    (tmp_path / "prelude.h").write_text(LEAN_PRELUDE)
    (tmp_path / "host.cpp").write_text(lean)
    includes = [f"-I{d}" for d in [*torch_include_dirs(), "/usr/local/cuda/include"]]
    run = subprocess.run(
        ["g++", "-std=c++17", "-fsyntax-only", *includes, "-include", "prelude.h", "host.cpp"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]


def test_object_cache_never_trusts_a_corrupt_or_foreign_entry(tmp_path):
    from kforge_mcp.targets.cuda.build_cache import ObjectCache

    cache = ObjectCache(tmp_path / "objects")
    built = tmp_path / "x.o"
    built.write_bytes(b"\x7fELF object bytes")
    assert cache.get("k1") is None
    path = cache.put("k1", built)
    assert cache.get("k1") == path and path.read_bytes() == built.read_bytes()
    path.write_bytes(b"\x7fELF truncat")  # a crash mid-write, or another toolchain's file under this name
    assert cache.get("k1") is None and not path.exists()  # rebuilt, never trusted
    assert cache.get("k2") is None  # another key (flags, toolchain, torch) is another object


def _torch_cxx(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    from kforge_mcp.targets.cuda.target import torch_include_dirs

    dirs = [*torch_include_dirs(), "/usr/local/cuda/include", sysconfig.get_paths()["include"]]
    cmd = ["g++", "-std=c++17", "-DTORCH_API_INCLUDE_EXTENSION_H", *[f"-I{d}" for d in dirs], *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)


@needs_nvcc
@pytest.mark.slow
def test_lean_bindings_take_what_kernelbench_declarations_use(tmp_path):
    """Both lean bindings preludes (the slim one for declarations, torch/python.h otherwise) know the types
    load_inline declarations use; one that needs the C++ frontend fails there, and the build then compiles
    the full header."""
    from kforge_mcp.targets.cuda.preludes import BINDINGS_PRELUDE, SLIM_BINDINGS_PRELUDE

    typical = (
        "torch::Tensor a(torch::Tensor x, double s);\nat::Tensor b(const at::Tensor& x, int64_t n);\n"
        "std::vector<torch::Tensor> c(std::vector<torch::Tensor> xs, c10::optional<torch::Tensor> y, torch::Scalar z);\n"
        "torch::Tensor d(torch::Tensor x, at::IntArrayRef shape, c10::ScalarType t, bool flag);\n"
    )
    frontend = "void e(torch::nn::Linear layer);\n"
    body = 'PYBIND11_MODULE(m, mod) { mod.def("a", torch::wrap_pybind_function(a)); }\n'
    results = {}
    for name, prelude in {"slim": SLIM_BINDINGS_PRELUDE, "python": BINDINGS_PRELUDE}.items():
        (tmp_path / f"{name}.h").write_text(prelude)
        for kind, decls in {"typical": typical, "frontend": frontend}.items():
            (tmp_path / "main.cpp").write_text(f"{decls}{body}")
            results[name, kind] = _torch_cxx(
                "-fsyntax-only", "-include", f"{name}.h", "main.cpp", cwd=tmp_path
            ).returncode
    assert results == {
        ("slim", "typical"): 0,
        ("slim", "frontend"): 1,
        ("python", "typical"): 0,
        ("python", "frontend"): 1,
    }


@needs_nvcc
@pytest.mark.slow
def test_slim_bindings_see_every_type_caster_the_full_header_brings(tmp_path):
    """pybind11 binds an argument type through the type_caster specialisations in scope; one missing would
    compile and then refuse the call at run time. So every header torch/extension.h pulls in that declares
    a caster (or makes a type opaque) must also come with the slim prelude, for the torch installed here."""
    from kforge_mcp.targets.cuda.preludes import FULL_BINDINGS_HEADER, SLIM_BINDINGS_PRELUDE

    (tmp_path / "full.cpp").write_text(FULL_BINDINGS_HEADER + "\n")
    (tmp_path / "slim.cpp").write_text(SLIM_BINDINGS_PRELUDE)
    casting = re.compile(r"\btype_caster\s*<|PYBIND11_TYPE_CASTER|PYBIND11_MAKE_OPAQUE|PYBIND11_DECLARE_HOLDER_TYPE")
    found = {}
    for name in ("full", "slim"):
        deps = _torch_cxx("-M", f"{name}.cpp", cwd=tmp_path)
        assert deps.returncode == 0, deps.stderr[-2000:]
        headers = {h for h in deps.stdout.replace("\\\n", " ").split() if h.endswith((".h", ".hpp"))}
        found[name] = {h for h in headers if casting.search(Path(h).read_text(errors="replace"))}
    assert len(found["full"]) >= 3  # pybind11's own casters and torch/csrc/utils/pybind.h at least
    assert any(h.endswith("torch/csrc/utils/pybind.h") for h in found["full"])
    assert found["full"] <= found["slim"], sorted(found["full"] - found["slim"])


def test_bindings_of_declarations_get_the_slim_prelude_and_keep_their_lines():
    """load_inline's main.cpp: the header, cpp_sources, the module it generates from ``functions``. Only
    declarations get the slim prelude (a body might call more of torch); lines stay where they were."""
    from kforge_mcp.targets.cuda.preludes import FULL_BINDINGS_HEADER, bindings_unit

    module = '\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\nm.def("f", torch::wrap_pybind_function(f), "f");\n}'
    declared = f'{FULL_BINDINGS_HEADER}\n#line 3 "c.py"\n#include <torch/extension.h>\n/* {{ */ torch::Tensor f(torch::Tensor x); // {{\n'
    name, source, header = bindings_unit(declared + module)
    assert name == "bindings" and "ATen/core/Tensor.h" in header
    assert source.count("\n") == (declared + module).count("\n") and "torch/extension.h>" not in source
    assert source.splitlines()[3].startswith("/* { */ torch::Tensor f(")
    with_body = f"{FULL_BINDINGS_HEADER}\ntorch::Tensor f(torch::Tensor x) {{ return torch::relu(x); }}\n"
    assert bindings_unit(with_body + module)[0] == "bindings-python"
    assert bindings_unit(declared)[0] == "bindings-python"  # no module from ``functions``: the source binds itself
    assert bindings_unit("torch::Tensor f(torch::Tensor x);\n" + module)[0] is None  # no_implicit_headers


def test_the_same_code_in_two_files_builds_the_same_units_and_errors_keep_each_file():
    """A batch's candidates are files of their own: with the file name in every #line directive no two
    of them shared an object (16 of 16 compiled everything on the H100). The units name every file
    alike; compiler messages get the candidate's own name back."""
    from kforge_mcp.targets.cuda.load import SHARED_NAME, own_name, shared_names
    from kforge_mcp.targets.source_map import map_pieces

    text = (ROOT / "examples/candidates/gemm_bias_relu/cuda.py").read_text()
    source = cuda_source(ROOT / "examples/candidates/gemm_bias_relu/cuda.py")
    pieces = map_pieces([source], text, "cuda_sources")
    a = shared_names([p.annotated("/runs/a/cuda_t64_0.py") for p in pieces], "/runs/a/cuda_t64_0.py")
    b = shared_names([p.annotated("/runs/b/cuda_t64_1.py") for p in pieces], "/runs/b/cuda_t64_1.py")
    assert a == b and f'"{SHARED_NAME}"' in a[0] and "cuda_t64" not in a[0]
    assert split(a[0]).host == split(b[0]).host
    gcc = f"{SHARED_NAME}:12:5: error: 'x' was not declared in this scope\n  (see {SHARED_NAME}:3)"
    nvcc = f'{SHARED_NAME}(40): error: identifier "y" is undefined'
    assert (
        own_name(gcc, "/runs/a/c.py")
        == "/runs/a/c.py:12:5: error: 'x' was not declared in this scope\n  (see /runs/a/c.py:3)"
    )
    assert own_name(nvcc, "/runs/a/c.py") == '/runs/a/c.py(40): error: identifier "y" is undefined'


def test_a_precompiled_header_is_built_in_the_background_and_a_dead_builds_marker_does_not_block_it(tmp_path):
    """A real g++ precompiles a small prelude; a 'building' marker left by a build that was killed
    (its pid gone) is cleared, where a live one holds off a second build."""
    from kforge_mcp.targets.cuda.build_cache import Pch

    pch = Pch(
        tmp_path, ["g++"], ["-std=c++17"], ("g++",), "host", "#pragma once\ninline int kforge_answer() { return 42; }\n"
    )
    dead = subprocess.Popen(["true"])
    dead.wait()
    (pch.dir / "building").write_text(str(dead.pid))  # the marker of a build killed with its worker
    pch.start_build()
    deadline = time.monotonic() + 120
    while not pch.ready and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pch.ready and not (pch.dir / "building").exists()
    (tmp_path / "use.cpp").write_text("int main() { return kforge_answer() == 42 ? 0 : 1; }\n")
    used = subprocess.run(
        ["g++", "-std=c++17", *pch.flags(), "-H", "-c", "use.cpp", "-o", "use.o"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert used.returncode == 0 and f"! {pch.gch}" in used.stderr, used.stderr  # '!': the .gch was used

    live = subprocess.Popen(["sleep", "30"])
    try:
        pch.ok.unlink()
        (pch.dir / "building").write_text(str(live.pid))  # another build, still running
        pch.start_build()
        assert (pch.dir / "building").read_text() == str(live.pid)  # left to it
    finally:
        live.kill()


@needs_nvcc
def test_a_host_unit_that_passed_its_check_is_not_compiled_again(tmp_path, monkeypatch):
    """compile checks the host unit beside every lean compile; after a kernel edit the host unit is the same
    text, and its pass is remembered by content instead of compiled again."""
    import torch.utils.cpp_extension as ce

    from kforge_mcp.targets.cuda import build_plan
    from kforge_mcp.targets.cuda import fast_build as fb

    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")
    host = "torch::Tensor f(torch::Tensor x) {\n  k<<<1, 1>>>(x.data_ptr<float>());\n  return x;\n}\n"
    plans = [
        build_plan.plan_build(
            ce.load_inline, "x", "torch::Tensor f(torch::Tensor x);", kernel + host, ["f"], {}, tmp_path / n
        )
        for n, kernel in (
            ("a", "__global__ void k(float* y) { y[0] = 1.0f; }\n"),
            ("b", "__global__ void k(float* y) { y[0] = 2.0f; }\n"),
        )
    ]
    build_plan.toolchain_id(plans[0])  # the compilers' versions, asked once per process
    compiles = []

    def compiler(cmd, **kwargs):
        compiles.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(fb.subprocess, "run", compiler)
    assert fb.check_host(plans[0], tmp_path / "cache", use_pch=False) == (True, "")
    assert fb.check_host(plans[1], tmp_path / "cache", use_pch=False) == (True, "")  # only the kernel changed
    assert len(compiles) == 1 and "-fsyntax-only" in compiles[0]


def test_the_host_library_is_linked_once_and_each_extension_runs_its_own_kernels(tmp_path):
    """Real g++ and the real loader: two builds that share their host code link it once; each extension
    gets a private copy, so two kernel versions loaded in one process each run their own (one shared copy
    would bind the second extension's host calls to the first one's kernels); torch's libraries are the
    host library's to load, not the kernels'; a link error is the linker's text."""
    import ctypes

    from torch.utils.cpp_extension import library_paths

    from kforge_mcp.targets.cuda.build_cache import ObjectCache
    from kforge_mcp.targets.cuda.build_plan import Plan
    from kforge_mcp.targets.cuda.split_link import HostLibrary, LinkError, link_kernels

    def compiled(name: str, text: str) -> Path:
        (tmp_path / f"{name}.cpp").write_text(text)
        subprocess.run(["g++", "-fPIC", "-c", f"{name}.cpp", "-o", f"{name}.o"], cwd=tmp_path, check=True)
        return tmp_path / f"{name}.o"

    main = compiled(
        "main", 'extern "C" int kforge_launch();\nextern "C" int kforge_init() { return kforge_launch(); }\n'
    )
    host = compiled(
        "host",
        "#include <cstddef>\nnamespace c10 { void* alloc_cpu(std::size_t); }\nint kforge_kernel();\n"
        'extern "C" void* kforge_alloc() { return c10::alloc_cpu(8); }\n'  # the host code uses torch
        'extern "C" int kforge_launch() { return kforge_kernel(); }\n',
    )
    plan = Plan(["g++"], ["nvcc"], [], [], [], [], ["-shared", f"-L{library_paths()[0]}", "-lc10"], "", "")
    objects = ObjectCache(tmp_path / "objects")
    extensions = []
    for version in (1, 2):
        device = compiled(f"device{version}", f"int kforge_kernel() {{ return {version}; }}\n")
        work = tmp_path / f"work{version}"
        work.mkdir()
        library = HostLibrary(plan, objects, main, host, work)
        path = library.wait()
        assert (library.seconds is None) == (version == 2)  # the second build reuses it
        private = tmp_path / f"libext{version}_host.so"
        assert link_kernels(plan, device, path, private, work) >= 0
        (work / "ext.so").replace(tmp_path / f"ext{version}.so")
        needed = subprocess.run(["readelf", "-d", f"ext{version}.so"], cwd=tmp_path, capture_output=True, text=True)
        assert str(private) in needed.stdout and "libc10" not in needed.stdout, needed.stdout
        extensions.append(ctypes.CDLL(str(tmp_path / f"ext{version}.so")))
    assert [e.kforge_init() for e in extensions] == [1, 2]
    host_needs = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True).stdout
    assert "libc10.so" in host_needs

    broken = Plan(["g++"], ["nvcc"], [], [], [], [], ["-shared", "-Wl,--no-undefined"], "", "")
    (tmp_path / "work3").mkdir()
    with pytest.raises(LinkError) as failed:
        HostLibrary(broken, objects, main, host, tmp_path / "work3").wait()
    assert "kforge_launch" in failed.value.output or "kforge_kernel" in failed.value.output


@needs_nvcc
def test_the_host_library_reaches_the_kernels_and_device_variables_nvcc_compiled(tmp_path):
    """Real nvcc: the device unit compiled with the split build's flags exports its kernels' host stubs, so
    a host library that launches a kernel and fills its __constant__ table (through the accessor the split
    writes) loads against it; nvcc 13 hides the stubs by default, and without the flags the loader cannot
    bind them."""
    import ctypes

    from kforge_mcp.targets.cuda import nvcc_steps
    from kforge_mcp.targets.cuda.build_cache import ObjectCache
    from kforge_mcp.targets.cuda.build_plan import Plan
    from kforge_mcp.targets.cuda.split_link import HostLibrary, link_kernels
    from kforge_mcp.targets.nvidia import find_tool

    nvcc = find_tool("nvcc")
    cudart = Path(nvcc).resolve().parents[1] / "lib64"
    (tmp_path / "device.cu").write_text(
        "__constant__ float kforge_table[4];\n__global__ void kforge_kernel(float* y) { y[0] = kforge_table[0]; }\n"
        'extern "C" void* kforge_symbol_table() { return (void*)&kforge_table; }\n'  # as the split hands it out
    )
    (tmp_path / "host.cpp").write_text(
        'void kforge_kernel(float*);\nextern "C" void* kforge_symbol_table();\n'
        'extern "C" void* kforge_kernel_at() { return (void*)&kforge_kernel; }\n'
        'extern "C" void* kforge_table_at() { return kforge_symbol_table(); }\n'
    )
    subprocess.run(["g++", "-fPIC", "-c", "host.cpp", "-o", "host.o"], cwd=tmp_path, check=True)
    (tmp_path / "main.cpp").write_text('extern "C" int kforge_main() { return 0; }\n')
    subprocess.run(["g++", "-fPIC", "-c", "main.cpp", "-o", "main.o"], cwd=tmp_path, check=True)
    plan = Plan(["g++"], [nvcc], [], [], [], [], ["-shared", f"-L{cudart}", "-lcudart"], "", "")
    loaded = {}
    for name, flags in (("visible", list(nvcc_steps.visible_kernel_flags((nvcc,)))), ("default", [])):
        compile_device = [nvcc, "-arch=sm_90a", "--compiler-options", "-fPIC", *flags, "-c", "device.cu", "-o"]
        subprocess.run([*compile_device, f"{name}.o"], cwd=tmp_path, check=True)
        work = tmp_path / name
        work.mkdir()
        library = HostLibrary(plan, ObjectCache(tmp_path / "objects"), tmp_path / "main.o", tmp_path / "host.o", work)
        link_kernels(plan, tmp_path / f"{name}.o", library.wait(), tmp_path / f"lib{name}_host.so", work)
        try:
            ext = ctypes.CDLL(str(work / "ext.so"))
            loaded[name] = (ext.kforge_kernel_at() is not None, ext.kforge_table_at() is not None)
        except OSError as e:
            loaded[name] = str(e)
    assert loaded["visible"] == (True, True), loaded
    if nvcc_steps.visible_kernel_flags((nvcc,)):  # this nvcc hides them unless told
        assert "undefined symbol" in str(loaded["default"]), loaded


def test_two_versions_of_an_extension_under_one_module_name_each_import_their_own(tmp_path):
    """Real pybind11 (torch's) and the real import: a kernel edit keeps the module name (the bindings are
    reused), and pybind11 3 hands back the module first created under a name, so the edited extension,
    imported by torch's helper where the first one was, runs the first one's code; import_extension gives
    each its own module, and refuses a module that comes back from another file."""
    import sysconfig

    from torch.utils.cpp_extension import _import_module_from_library, include_paths

    from kforge_mcp.targets.cuda.fast_build import import_extension

    (tmp_path / "main.cpp").write_text(
        "#include <pybind11/pybind11.h>\nint kforge_kernel();\n"
        'PYBIND11_MODULE(kforge_same_name, m) { m.def("run", &kforge_kernel); }\n'
    )
    includes = ["-isystem", include_paths()[0], "-isystem", sysconfig.get_paths()["include"]]
    subprocess.run(
        ["g++", "-O0", "-fPIC", "-std=c++17", *includes, "-c", "main.cpp", "-o", "main.o"], cwd=tmp_path, check=True
    )
    paths = []
    for version in (1, 2):
        folder = tmp_path / f"kforge_same_name-{version}"
        folder.mkdir()
        (folder / "kernel.cpp").write_text(f"int kforge_kernel() {{ return {version}; }}\n")
        subprocess.run(["g++", "-fPIC", "-c", "kernel.cpp", "-o", "kernel.o"], cwd=folder, check=True)
        link = ["g++", "-shared", str(tmp_path / "main.o"), "kernel.o", "-o", "kforge_same_name.so"]
        subprocess.run(link, cwd=folder, check=True)
        paths.append(folder / "kforge_same_name.so")
    own = [import_extension(p) for p in paths]
    assert [m.run() for m in own] == [1, 2]
    assert own[1].__name__ == "kforge_kforge_same_name_2.kforge_same_name"
    twin = tmp_path / "kforge_same_name_2"  # a folder whose name reads as the second one's: refused, not reused
    shutil.copytree(paths[1].parent, twin)
    with pytest.raises(ImportError, match="gave back the module of"):
        import_extension(twin / "kforge_same_name.so")
    by_name = [_import_module_from_library("kforge_same_name", str(p.parent), True) for p in paths]
    assert by_name[0].run() == 1 and by_name[1].run() in (1, 2)  # 1 where pybind11 caches modules by name


def test_the_host_units_launches_name_the_template_kernels_it_needs():
    kernel = "template <typename scalar_t, int V>\n__global__ void k(const scalar_t* x, scalar_t* y, int n) {}\n"
    dispatch = (
        "void f(torch::Tensor x) {\n  AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::kBFloat16, x.scalar_type(), "
        '"f", [&] {\n    k<scalar_t, 4><<<1, 256>>>(x.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), 1);\n  });\n}\n'
    )
    taken = [re.search(r"&(.*)\);$", line).group(1) for line in split(kernel + dispatch).likely_instantiations()]
    assert taken == ["k<float, 4>", "k<double, 4>", "k<at::Half, 4>", "k<at::BFloat16, 4>"]
    literal = "void f(float* x) {\n  k<float, 8><<<1, 1>>>(x, x, 1);\n  k<float, 8><<<2, 1>>>(x, x, 1);\n}\n"
    assert len(split(kernel + literal).likely_instantiations()) == 1
    # the type ATen computes each dispatched type in goes with it; a type only the compiler knows does not
    pair = "template <typename scalar_t, typename acc_t>\n__global__ void k(const scalar_t* x, acc_t a) {}\n"
    opmath = dispatch.replace("[&] {\n", "[&] {\n    using acc_t = at::opmath_type<scalar_t>;\n").replace(
        "k<scalar_t, 4><<<1, 256>>>(x.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), 1)",
        "k<scalar_t, acc_t><<<1, 1>>>(x, 1)",
    )
    taken = [re.search(r"&(.*)\);$", line).group(1) for line in split(pair + opmath).likely_instantiations()]
    assert taken == ["k<float, float>", "k<double, double>", "k<at::Half, float>", "k<at::BFloat16, float>"]
    assert (
        split(pair + opmath.replace("at::opmath_type<scalar_t>", "my_acc<scalar_t>::type")).likely_instantiations()
        is None
    )
    assert (
        split(kernel + dispatch.replace("AT_DISPATCH_FLOATING_TYPES_AND2", "AT_DISPATCH_V2")).likely_instantiations()
        is None
    )
    assert (
        split(kernel.replace("template <typename scalar_t, int V>\n", "") + "void f() {}\n").likely_instantiations()
        is None
    )


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("extra, expected", [(False, "used"), (True, "missed")])
def test_template_kernels_compile_beside_the_host_unit_and_the_host_object_still_decides(
    extra, expected, tmp_path, monkeypatch
):
    """With a core to spare, the device unit compiles the instantiations the launches name while the host unit
    compiles; the host object then checks them: a kernel they missed (here k<int>, through a template function
    the dispatch does not reach) is compiled again with the host object's list, and the object defines it."""
    import torch.utils.cpp_extension as ce

    from kforge_mcp.targets.cuda import build_plan
    from kforge_mcp.targets.cuda import fast_build as fb
    from kforge_mcp.targets.cuda.symbols import defined_symbols

    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")
    monkeypatch.setattr(fb.os, "cpu_count", lambda: 16)
    kernel = (
        "template <typename scalar_t>\n__global__ void k(const scalar_t* x, scalar_t* y, long n) { y[0] = x[0]; }\n"
    )
    helper = "template <typename scalar_t>\nvoid run_int(int* x) {\n  k<scalar_t><<<1, 1>>>(x, x, 1);\n}\n"
    host = (
        'torch::Tensor f(torch::Tensor x) {\n  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "f", [&] {\n'
        "    k<scalar_t><<<1, 1>>>(x.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), x.numel());\n  });\n"
        + ("  run_int<int>(nullptr);\n" if extra else "")
        + "  return x;\n}\n"
    )
    plan = build_plan.plan_build(
        ce.load_inline,
        "x",
        "torch::Tensor f(torch::Tensor x);",
        kernel + (helper if extra else "") + host,
        ["f"],
        {},
        tmp_path / "plan",
    )
    out = tmp_path / "out"
    out.mkdir()
    info = fb.build(plan, "x", out, tmp_path / "cache", use_pch=False, link=False)
    assert info.path == "split" and info.likely_instantiations == expected, vars(info)
    defined = set().union(*(defined_symbols(p) for p in (tmp_path / "cache" / "objects").glob("*.o")))
    wanted = {"void k<float>(float const*, float*, long)", "void k<double>(double const*, double*, long)"}
    if extra:
        wanted.add("void k<int>(int const*, int*, long)")
    assert wanted <= defined


@needs_nvcc
@pytest.mark.parametrize("cores", [2, 16])
def test_a_kernel_edit_of_template_kernels_takes_the_host_object_its_first_build_kept(cores, tmp_path, monkeypatch):
    """With a core to spare or not, a kernel edit's device unit instantiates its template kernels as the first
    build's did, so its host side is the same and nvcc's last step is not run again (nvcc_steps.py)."""
    import torch.utils.cpp_extension as ce

    from kforge_mcp.targets.cuda import build_plan
    from kforge_mcp.targets.cuda import fast_build as fb

    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")
    monkeypatch.setattr(fb.os, "cpu_count", lambda: cores)
    host = (
        'torch::Tensor f(torch::Tensor x) {\n  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "f", [&] {\n'
        "    k<scalar_t><<<1, 1>>>(x.data_ptr<scalar_t>(), x.numel());\n  });\n  return x;\n}\n"
    )
    infos = []
    # the edit keeps the kernel's lines: the host unit, which keeps the source's line numbers, is then the same
    for i, body in enumerate(("y[0] = y[0] * 2;", "for (long j = 0; j < n; ++j) y[j] = y[j] * 3 + 1;")):
        kernel = f"template <typename scalar_t>\n__global__ void k(scalar_t* y, long n) {{\n  {body}\n}}\n"
        plan = build_plan.plan_build(
            ce.load_inline, "x", "torch::Tensor f(torch::Tensor x);", kernel + host, ["f"], {}, tmp_path / f"plan{i}"
        )
        out = tmp_path / f"out{i}"
        out.mkdir()
        infos.append(fb.build(plan, "x", out, tmp_path / "cache", use_pch=False, link=False))
    assert "device" in infos[1].compiled and "host" in infos[1].reused, vars(infos[1])
    assert "device host object" in infos[1].reused, vars(infos[1])
    assert "device host object" not in infos[0].reused


def test_a_units_preprocessed_text_leaves_out_the_layout_and_keeps_what_a_line_number_changes(tmp_path):
    """Real g++ and a precompiled header of its own: a unit moved down by blank lines (a kernel edit above it)
    preprocesses to the same text; a check that expands __LINE__, or a call whose line the compiler takes from
    the markers (c10's SourceLocation::current(), the one torch's headers declare), moves with it; without the
    precompiled header there is no such text."""
    from kforge_mcp.targets.cuda.build_cache import preprocessed_text

    header = tmp_path / "pre.h"
    header.write_text(
        "#pragma once\n#define CHECK(c) do { if (!(c)) fail(__LINE__); } while (0)\nvoid fail(int line);\n"
        "struct SourceLocation { static int current(int line = __builtin_LINE()) { return line; } };\n"
    )
    subprocess.run(["g++", "-x", "c++-header", str(header), "-o", str(header) + ".gch"], check=True)
    cmd = ["g++", "-Winvalid-pch", "-include", str(header), "-x", "c++", "-c", "host.cpp", "-o", "host.o"]

    def text(body: str, above: int) -> str | None:
        (tmp_path / "host.cpp").write_text("\n" * above + body)
        return preprocessed_text(cmd, tmp_path)

    plain = "int f(int x) {\n  return x + 1;\n}\n"
    checked = "int f(int x) {\n  CHECK(x > 0);\n  return x + 1;\n}\n"
    located = "int f(int x) {\n  return SourceLocation::current() + x;\n}\n"  # as c10's logging macros call it
    assert text(plain, 0) is not None and text(plain, 0) == text(plain, 3)
    assert text(checked, 0) != text(checked, 3)
    assert text(located, 0) != text(located, 3)
    (tmp_path / "pre.h.gch").unlink()
    assert text(plain, 0) is None
