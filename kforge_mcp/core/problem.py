"""Problems (KernelBench-form references) and candidates: resolving them from text or a path,
and loading and validating them inside a worker.

A problem defines ``class Model(nn.Module)``, ``get_inputs()`` and ``get_init_inputs()``.
``get_inputs()`` returns CPU tensors; the engine moves them to the device.
"""

from __future__ import annotations

import functools
import os
import re
import tempfile
import types
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from kforge_mcp.core.errors import CandidateError, InputError
from kforge_mcp.core.schemas import Diagnostic
from kforge_mcp.core.source import Source, SourceRuntimeError, diagnostics_from_exception, import_source

REQUIRED_PROBLEM_NAMES = ("Model", "get_inputs", "get_init_inputs")


def default_allowed_roots() -> list[Path]:
    """Where the library reads paths from by default: the working directory and the system temp
    dir (``kforge serve`` allows only its working directory unless told; the CLI verbs, anywhere)."""
    return [Path.cwd(), Path(tempfile.gettempdir())]


def check_allowed_path(path: Path | str, role: str, allowed_roots: Sequence[Path | str]) -> Path:
    """The real path of ``path`` when it lies under one of ``allowed_roots`` (both resolved, so
    neither ``..`` nor a symlink leads out); an InputError otherwise."""
    real = Path(os.path.realpath(Path(path).expanduser()))
    roots = [Path(os.path.realpath(Path(r).expanduser())) for r in allowed_roots]
    if any(real == root or real.is_relative_to(root) for root in roots):
        return real
    raise InputError(
        f"{role}: {path} is outside the allowed directories ({', '.join(map(str, roots)) or 'none'}); "
        "pass the source text instead, or allow its directory (kforge-mcp --allow-dir DIR)"
    )


# one line of no code: a folder separator, a home-relative start or a file name with a suffix
_PATHISH = re.compile(r"(~|\.{1,2}[/\\]|[A-Za-z]:[/\\])?[^\s()=;:'\"#,\[\]{}<>]*([/\\][^()=;'\"#\[\]{}<>]*|\.\w+)")


def looks_like_path(value: str) -> bool:
    """A one-line value ending in .py, or one shaped like a path (``kernels/gemm``, ``gemm.cu``,
    ``~/k/gemm.txt``): read as a file, so a mistyped path is 'file not found' rather than a
    SyntaxError at line 1 of its own text."""
    text = value.strip()
    return "\n" not in text and (text.endswith(".py") or _PATHISH.fullmatch(text) is not None)


def resolve_source(value: str, role: str, allowed_roots: Sequence[Path | str] | None = None) -> Source:
    """Accept source text or a path to a .py file. ``role`` names the argument in errors.
    With ``allowed_roots``, a path must resolve to a file under one of them."""
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{role}: empty; pass Python source text or a path to a .py file")
    if looks_like_path(value):
        path = Path(value.strip()).expanduser()
        if allowed_roots is not None:
            check_allowed_path(path, role, allowed_roots)
        if not path.is_file():
            raise InputError(f"{role}: file not found: {path}")
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"{role}: cannot read {path}: {e}") from e
        return Source(text=text, name=str(path))
    return Source(text=value, name=f"<{role}>")


# ---- inside a worker only: these execute the submitted code ----


def seed_everything(seed: int) -> None:
    """What ``torch.manual_seed`` seeds, without its cost: it also queues a seed, with a formatted
    stack, for every device module not started (XPU, MTIA), about 1 ms a call, and timing draws
    fresh inputs under a new seed for every timed call."""
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.random.default_generator.manual_seed(seed)
    for seed_device in _device_seeders():
        seed_device(seed)


@functools.cache
def _device_seeders() -> list:
    """The generators of the devices this process has: CUDA's (queued until CUDA starts, so the
    seed still holds then), XPU's, MPS's."""
    import torch

    seeders = [torch.cuda.manual_seed_all] if torch.cuda.is_available() else []
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        seeders.append(torch.xpu.manual_seed_all)
    if torch.backends.mps.is_available():
        seeders.append(torch.mps.manual_seed)
    return seeders


def to_device(value, device: str):
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    return value


@dataclass
class LoadedProblem:
    source: Source
    module: types.ModuleType
    path: Path

    def call(self, name: str):
        """Call get_inputs / get_init_inputs, turning a failure into an input error with its line."""
        try:
            value = getattr(self.module, name)()
        except Exception as e:  # noqa: BLE001  (the problem's own code can raise anything: an input error naming it)
            raise InputError(
                f"problem: {name}() raised {type(e).__name__}: {e}",
                diagnostics_from_exception(e, self.path, self.source),
            ) from None
        if not isinstance(value, (list, tuple)):
            raise InputError(f"problem: {name}() must return a list or tuple, got {type(value).__name__}")
        return list(value)

    def make_inputs(self, seed: int, device: str, on_device: bool = False) -> list:
        """get_inputs() under ``seed``; ``on_device``: its tensors made on the device itself (fast
        enough to draw fresh inputs for every timed call), falling back to the CPU if it cannot."""
        seed_everything(seed)
        if on_device and device != "cpu" and not getattr(self, "_host_only", False):
            import torch

            try:
                with torch.device(device):
                    return to_device(self.call("get_inputs"), device)
            except (InputError, RuntimeError, TypeError):  # e.g. a get_inputs that goes through numpy
                self._host_only = True
                seed_everything(seed)
        return to_device(self.call("get_inputs"), device)

    def meta_inputs(self) -> list:
        """get_inputs() on the meta device: shapes and dtypes without a value drawn (a 537 MB input took 0.7 s to
        draw on the host); where it insists on real tensors (numpy, values read back), drawn on the CPU and moved."""
        import torch

        try:
            with torch.device("meta"):
                values = self.call("get_inputs")
        except InputError:
            values = self.make_inputs(7, "cpu")
        return to_device(values, "meta")

    def check_inputs_fit(self, limit_mb: int) -> None:
        """An input error when get_inputs() alone makes more than a worker may hold (``limit_mb``; 0: no limit).
        Its tensors are made on the meta device (sizes, no memory), so a 10 GB problem is told so before a
        byte of it exists; a get_inputs() that cannot run there (numpy, values read back) is not checked."""
        import torch

        try:
            with torch.device("meta"):
                inputs = self.module.get_inputs()
        except Exception:  # noqa: BLE001  (data-dependent code cannot run on meta: the memory watchdog remains)
            return
        tensors = [x for x in (inputs if isinstance(inputs, (list, tuple)) else []) if isinstance(x, torch.Tensor)]
        nbytes = sum(x.numel() * x.element_size() for x in tensors)
        if not limit_mb or nbytes <= limit_mb * 2**20:
            return
        shapes = ", ".join(f"{'x'.join(map(str, x.shape))} {str(x.dtype).removeprefix('torch.')}" for x in tensors[:4])
        raise InputError(
            f"problem: get_inputs() makes {nbytes / 2**30:.1f} GiB of tensors ({shapes}), more than a worker may "
            f"hold: its memory limit is {limit_mb / 1024:.1f} GiB (KFORGE_WORKER_MEMORY_MB={limit_mb}; "
            "Engine(memory_limit_mb=...) in the library). Make the inputs smaller, or raise the limit where the "
            "machine has the memory"
        )

    def input_sets(self, device: str, seed: int = 0) -> list[list]:
        """Extra shapes a problem may declare with ``get_input_sets()``: a list of input lists."""
        if not callable(getattr(self.module, "get_input_sets", None)):
            return []
        seed_everything(seed)
        sets = self.call("get_input_sets")
        if not all(isinstance(s, (list, tuple)) for s in sets):
            raise InputError("problem: get_input_sets() must return a list of input lists")
        return [to_device(list(s), device) for s in sets]

    def init_inputs(self, device: str, seed: int = 0) -> list:
        seed_everything(seed)
        return to_device(self.call("get_init_inputs"), device)


def load_problem(source: Source, workdir: Path) -> LoadedProblem:
    """Import a problem and check it has the KernelBench names. Building and running it is
    checked by ``build_models`` and the first reference forward."""
    try:
        module = import_source(source, workdir, "problem")
    except SourceRuntimeError as e:
        raise InputError(f"problem: {e}", e.diagnostics) from None
    missing = [n for n in REQUIRED_PROBLEM_NAMES if not callable(getattr(module, n, None))]
    if missing:
        raise InputError(
            f"problem {source.name} does not define {', '.join(missing)}: a problem needs class Model(nn.Module), "
            "get_inputs() and get_init_inputs() (KernelBench form)"
        )
    assert module.__file__ is not None  # imported from the file import_source wrote
    return LoadedProblem(source=source, module=module, path=Path(module.__file__))


def drawn_on(device: str):
    """Where a model's parameters are drawn: on the device itself (a Level 2 GEMM's 8192x8192 kaiming init took
    0.4-0.7 s a model on the host); build_models falls back to the host for code that cannot run there."""
    import torch

    return nullcontext() if device == "cpu" else torch.device(device)


def reference_model(problem: LoadedProblem, device: str, seed: int = 0, dtype=None, init: list | None = None):
    """Model(*get_init_inputs()) on ``device``, its weights drawn under ``seed`` on the device."""
    init = problem.init_inputs(device, seed) if init is None else init
    seed_everything(seed)
    try:
        with drawn_on(device):
            return problem.module.Model(*init).to(device, dtype)
    except Exception as e:  # noqa: BLE001  (the problem's own code can raise anything: an input error naming it)
        raise InputError(
            f"problem: Model(*get_init_inputs()) raised {type(e).__name__}: {e}",
            diagnostics_from_exception(e, problem.path, problem.source),
        ) from None


def build_models(
    problem: LoadedProblem, candidate_module, device: str, build_reference: bool = True, seed: int = 0, dtype=None
):
    """Model and ModelNew with the same weights: ``seed`` is set again before get_init_inputs()
    and before each construction, both drawn on the device; with ``dtype`` both are cast to it (a verify's
    precision). Where either cannot be built there, both are built on the host and moved, so their weights
    still come from one generator."""
    try:
        return _built(problem, candidate_module, device, build_reference, seed, dtype, device)
    except (InputError, SourceRuntimeError):
        if device == "cpu":
            raise
    return _built(problem, candidate_module, device, build_reference, seed, dtype, "cpu")


def _built(
    problem: LoadedProblem, candidate_module, device: str, build_reference: bool, seed: int, dtype, draw_on: str
):
    new_cls = getattr(candidate_module, "ModelNew", None)
    if new_cls is None:
        name = getattr(getattr(candidate_module, "__kforge_source__", None), "name", None)
        raise CandidateError(
            "candidate defines no class ModelNew: it must define class ModelNew(nn.Module) "
            "with the same constructor and forward signature as Model",
            [Diagnostic(file=name, message="no class ModelNew")],
        )
    with drawn_on(draw_on):
        init = problem.init_inputs(device, seed)
    reference = reference_model(problem, draw_on, seed, None, init).to(device, dtype) if build_reference else None
    seed_everything(seed)
    try:
        with drawn_on(draw_on):
            candidate = new_cls(*init).to(device, dtype)
    except Exception as e:  # noqa: BLE001  (candidate code can raise anything: diagnostics at its line)
        diags = diagnostics_from_exception(e, Path(candidate_module.__file__), candidate_module.__kforge_source__)
        raise SourceRuntimeError(f"ModelNew(*get_init_inputs()) raised {type(e).__name__}: {e}", diags) from None
    return reference, candidate
