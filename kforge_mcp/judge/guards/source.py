"""Introspection in the candidate's source (the garbage collector, frames, tracing): a way to reach the
reference's output."""

from __future__ import annotations

import ast

from kforge_mcp.core.schemas import Finding

INTROSPECTION = {"get_objects", "get_referrers", "get_referents", "_getframe", "stack", "currentframe", "settrace"}


INTROSPECTION_MODULES = ("gc", "sys", "inspect", "traceback", "threading")


def introspection_calls(tree: ast.AST) -> set[str]:
    """The introspection names a source reaches through the modules that own them (``sys._getframe``,
    ``inspect.stack``, ``from gc import get_objects``), not any attribute of that name: ``torch.stack`` and
    ``np.stack`` stack tensors."""
    modules = set(INTROSPECTION_MODULES)
    names: dict[str, str] = {}  # local name -> the introspection function it binds
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            modules |= {a.asname or a.name for a in n.names if a.name in INTROSPECTION_MODULES}
        elif isinstance(n, ast.ImportFrom) and n.module in INTROSPECTION_MODULES:
            names |= {a.asname or a.name: a.name for a in n.names if a.name in INTROSPECTION}
    used = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and n.attr in INTROSPECTION:
            root = n.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if not isinstance(root, ast.Name) or root.id in modules:  # a root we cannot place stays suspect
                used.add(n.attr)
        elif isinstance(n, ast.Name) and n.id in names:
            used.add(names[n.id])
    return used


def static_findings(source_text: str) -> list[Finding]:
    """Source-level red flags: introspection that can find the reference's tensors."""
    try:
        tree = ast.parse(source_text)
    except SyntaxError:
        return []
    used = sorted(introspection_calls(tree))
    if not used:
        return []
    return [
        Finding(
            code="introspection",
            severity="suspicious",
            evidence={"calls": used},
            message=f"the candidate inspects the interpreter ({', '.join(used)}): it could find the reference's tensors",
        )
    ]
