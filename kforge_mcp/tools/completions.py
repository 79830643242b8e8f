"""completion/complete: what a host offers as the user types a prompt's or a run resource's argument.
Targets and devices by name, run ids from the store, and .py paths under the allowed folders."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
from mcp.server.mcpserver import MCPServer
from mcp_types import Completion, PromptReference, ResourceTemplateReference

from kforge_mcp.core.errors import KforgeError
from kforge_mcp.store import RunStore
from kforge_mcp.targets import TARGETS
from kforge_mcp.tools.common import App, invalid_params

MAX_VALUES = 100  # the spec's cap per answer
PATH_ARGUMENTS = ("problem", "candidate", "source", "path")


def matching(values, prefix: str) -> Completion:
    found = [v for v in dict.fromkeys(values) if v.startswith(prefix)]
    return Completion(values=found[:MAX_VALUES], total=len(found), has_more=len(found) > MAX_VALUES)


def python_paths(prefix: str, roots: list[Path]) -> list[str]:
    """Folders and .py files that continue ``prefix`` (an absolute path, or relative to the first
    allowed folder), inside the allowed folders only: the server would refuse any other path."""
    base = roots[0] if roots else Path.cwd()
    typed = Path(prefix) if prefix else base
    folder = typed if prefix.endswith(os.sep) or not prefix else typed.parent
    folder = folder if folder.is_absolute() else base / folder
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return []
    shown = []
    for entry in entries:
        if entry.name.startswith(".") or not (entry.is_dir() or entry.suffix == ".py"):
            continue
        resolved = entry.resolve()
        if not any(resolved == r or r in resolved.parents or resolved in r.parents for r in roots):
            continue
        text = str(entry) if Path(prefix).is_absolute() else os.path.relpath(entry, base)
        shown.append(text + (os.sep if entry.is_dir() else ""))
    return shown


def register(mcp: MCPServer, app: App) -> None:
    async def devices() -> list[str]:
        try:  # cached after the first probe (a worker that imports torch: a few seconds once)
            report = await anyio.to_thread.run_sync(app.engine.list_targets)
        except KforgeError:
            return ["cpu"]
        return [d for t in report.targets for d in t.devices] + ["cpu"]

    def run_ids() -> list[str]:
        try:
            return [r.id for r in RunStore.for_home(app.engine.home).list_runs()]
        except KforgeError:
            return []

    @mcp.completion()
    async def complete(ref, argument, context):
        if isinstance(ref, PromptReference):
            if ref.name not in {p.name for p in await mcp.list_prompts()}:
                raise invalid_params(f"Unknown prompt: {ref.name}")
        elif isinstance(ref, ResourceTemplateReference):
            if ref.uri not in {t.uri_template for t in await mcp.list_resource_templates()}:
                raise invalid_params(f"Unknown resource template: {ref.uri}")
        name, value = argument.name, argument.value
        if name == "target":
            return matching(TARGETS, value)
        if name == "device":
            return matching(await devices(), value)
        if name == "run_id":
            return matching(await anyio.to_thread.run_sync(run_ids), value)
        if name in PATH_ARGUMENTS:
            return matching(await anyio.to_thread.run_sync(python_paths, value, app.engine.allow_dirs), value)
        return None  # free text (feedback, a candidate's source): nothing to offer
