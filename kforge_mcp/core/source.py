"""Submitted Python source (a problem or a candidate): its text and name, importing it as a module
inside a worker, and failures turned into diagnostics. Below problem.py and the targets, which
both import sources.

The source is written to a real file first: Triton's JIT reads kernel source through
``inspect``, and tracebacks then carry line numbers of the submitted text.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import sys
import traceback
import types
from dataclasses import dataclass
from pathlib import Path

from kforge_mcp.core.errors import CandidateError, InputError
from kforge_mcp.core.schemas import Diagnostic

_counter = itertools.count()


@dataclass(frozen=True)
class Source:
    """Python source text plus the name diagnostics should use for it."""

    text: str
    name: str  # the submitted path, or "<problem>" / "<candidate>"

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]

    def to_wire(self) -> dict:
        return {"text": self.text, "name": self.name}

    @classmethod
    def from_wire(cls, d: dict) -> Source:
        return cls(text=d["text"], name=d["name"])


class SourceRuntimeError(Exception):
    """Submitted code raised while importing or running; carries diagnostics."""

    def __init__(self, message: str, diagnostics: list[Diagnostic]):
        super().__init__(message)
        self.diagnostics = diagnostics


def write_source(source: Source, workdir: Path, stem: str) -> Path:
    path = workdir / f"{stem}_{next(_counter)}.py"
    path.write_text(source.text)
    return path


def diagnostics_from_exception(exc: BaseException, path: Path, source: Source) -> list[Diagnostic]:
    """Point at the deepest frame inside the submitted file, in the exception or the one it was
    raised from (Triton's interpreter wraps a ``tl.load`` error raised in the kernel into one raised
    at the launch); fall back to the exception alone."""
    if isinstance(exc, SyntaxError) and exc.filename == str(path):
        return [Diagnostic(line=exc.lineno, column=exc.offset, message=f"SyntaxError: {exc.msg}", file=source.name)]
    lines = [_deepest_line(e, path) for e in _causes(exc)]
    line = next((n for n in reversed(lines) if n is not None), None)
    message = f"{type(exc).__name__}: {exc}"
    diags = [Diagnostic(line=line, message=message, file=source.name)]
    if lines[0] is not None and lines[0] != line:  # e.g. Triton's interpreter: the load raised, the launch re-raised
        diags.append(Diagnostic(line=lines[0], severity="note", message="reached from here", file=source.name))
    return diags


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from (``raise ... from e``), outermost first. Only
    explicit causes: an implicit context is often an unrelated error the code handled."""
    chain = [exc]
    while chain[-1].__cause__ is not None and len(chain) < 16:
        chain.append(chain[-1].__cause__)
    return chain


def _deepest_line(exc: BaseException, path: Path) -> int | None:
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == str(path):
            line = frame.lineno
    return line


def import_source(source: Source, workdir: Path, stem: str) -> types.ModuleType:
    """Execute ``source`` as a fresh module. Syntax errors are the caller's input errors;
    anything raised while executing it is a SourceRuntimeError with the line it came from."""
    path = write_source(source, workdir, stem)
    name = f"kforge_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None  # a .py file always gets a spec with a loader
    module = importlib.util.module_from_spec(spec)
    # lets later errors map lines back to the submitted name (an attribute ModuleType does not declare)
    module.__kforge_source__ = source  # type: ignore[attr-defined]
    sys.modules[name] = module  # dataclasses and pickling look modules up by name
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        sys.modules.pop(name, None)
        diags = diagnostics_from_exception(e, path, source)
        error = CandidateError if stem == "candidate" else InputError
        raise error(f"{source.name}: syntax error", diags) from None
    except Exception as e:  # noqa: BLE001  (submitted code can raise anything on import: diagnostics at its line)
        sys.modules.pop(name, None)
        diags = diagnostics_from_exception(e, path, source)
        raise SourceRuntimeError(f"{source.name}: raised while importing: {type(e).__name__}: {e}", diags) from None
    return module


def forget_module(module: types.ModuleType) -> None:
    sys.modules.pop(module.__name__, None)
