"""Errors the caller can act on. Tools turn these into MCP tool errors the model can read."""

from __future__ import annotations

from kforge_mcp.core.schemas import Diagnostic


class KforgeError(Exception):
    """Base class: something the caller asked for cannot be done, and the message says why."""

    def __init__(self, message: str, diagnostics: list[Diagnostic] | None = None):
        super().__init__(message)
        self.message = message
        self.diagnostics = diagnostics or []

    def __str__(self) -> str:
        lines = [self.message]
        for d in self.diagnostics:
            where = f"{d.file or '<source>'}:{d.line}" if d.line else (d.file or "<source>")
            if d.line and d.column:
                where += f":{d.column}"
            lines.append(f"  {where}: {d.severity}: {d.message}")
        return "\n".join(lines)


class InputError(KforgeError):
    """Bad input: a missing file, a problem without get_inputs, a candidate without ModelNew, ..."""


class CandidateError(InputError):
    """What is wrong is the candidate itself (a syntax error, no ModelNew): verify answers it with an
    ``error`` verdict and diagnostics; anywhere else it is an input error like the others."""


class UnknownTargetError(InputError):
    pass
