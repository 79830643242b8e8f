"""A worker's reply read as what the verb asked for: the report of an ok reply, the InputError of a refused
input, and a failure the verb turns into its own failed report."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

from kforge_mcp.core.errors import InputError
from kforge_mcp.core.requests import Done, InputFailure, InternalFailure, Reply
from kforge_mcp.core.schemas import Diagnostic
from kforge_mcp.core.source import Source
from kforge_mcp.runtime.pool import WorkerFailure

R = TypeVar("R", bound=BaseModel)


def report_of(reply: Reply, model: type[R]) -> R | InternalFailure:
    """The ``model`` an ok reply carries; a refused input raised as its InputError (with the worker's
    diagnostics); an internal failure returned, for the verb to report in its own terms."""
    match reply:
        case Done():
            return model.model_validate(reply.value)
        case InputFailure():
            raise InputError(reply.message, reply.diagnostics)
        case InternalFailure():
            return reply


def failure_errors(failure: WorkerFailure | InternalFailure) -> list[str]:
    """What a report's ``errors`` say of a worker that died, hung or raised: the message, then its stderr's
    end or its traceback."""
    if isinstance(failure, WorkerFailure):
        return [failure.message] + ([failure.stderr_tail] if failure.stderr_tail else [])
    return [failure.message, failure.traceback]


def failure_diagnostic(e: WorkerFailure, source: Source) -> Diagnostic:
    """A dead worker's message on the submitted line it died at, when its stack names one."""
    return Diagnostic(line=e.line, message=e.message, file=source.name if e.line else None)
