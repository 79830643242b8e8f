"""The shape of the package in figures: import circles, imports that climb back up the floors,
the longest files, ``# fmt: skip`` comments, and where KFORGE_* settings are named and read.

    python bench/structure.py            # prints a markdown summary

Every import counts, including the ones inside functions (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "kforge_mcp"

# The floors, bottom (0) to top. A module may import its own floor or any floor below it.
# The first matching prefix wins (so "kforge_mcp.cli" matches before "kforge_mcp").
FLOORS = [
    ("kforge_mcp.core", 0),
    ("kforge_mcp.devices", 1),
    ("kforge_mcp.targets", 2),
    ("kforge_mcp.runtime", 3),
    ("kforge_mcp.judge", 4),
    ("kforge_mcp.profiling", 5),
    ("kforge_mcp.advice", 6),
    ("kforge_mcp.worker_jobs", 7),
    ("kforge_mcp.store", 8),
    ("kforge_mcp.agents", 8),
    ("kforge_mcp.suite", 9),
    ("kforge_mcp.suite_report", 9),
    ("kforge_mcp.api", 9),
    ("kforge_mcp.prompts", 2),  # one-shot examples: data, imported by nothing at runtime
    ("kforge_mcp.tools", 10),
    ("kforge_mcp.server", 11),
    ("kforge_mcp.http_transport", 12),
    ("kforge_mcp.stdio_transport", 12),
    ("kforge_mcp.cli", 13),
    ("kforge_mcp", 9),  # the package's __init__: the headless API
]
FLOOR_NAMES = [
    "core",
    "devices",
    "targets",
    "runtime",
    "judge",
    "profiling",
    "advice",
    "worker jobs",
    "store, agents",
    "api, suite, the package's functions",
    "tools",
    "server",
    "transports",
    "cli",
]


def floor(module: str) -> int:
    best = None
    for prefix, level in FLOORS:
        if module == prefix or module.startswith(prefix + "."):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, level)
    return best[1] if best else 5


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of the package that ``name`` imports (``from . import x`` names module x when x is one)."""
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("kforge_mcp"):
                    found.add(a.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parent = base[: len(base) - node.level + 1]
                mod = ".".join(parent + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not mod.startswith("kforge_mcp"):
                continue
            for a in node.names:
                sub = f"{mod}.{a.name}"
                found.add(sub if sub in known else mod)
    return {m for m in found if m in known and m != name}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main() -> None:
    mods = modules()
    known = set(mods)
    # the package __init__ is imported by every submodule anyway; its lazy re-exports are not a dependency
    graph = {m: (imports(m, p, known) - {"kforge_mcp"}) for m, p in mods.items()}
    upward = sorted((m, d) for m, ds in graph.items() for d in ds if floor(d) > floor(m))
    lines = {m: len(p.read_text().splitlines()) for m, p in mods.items()}
    longest = sorted(lines.items(), key=lambda kv: -kv[1])
    fmt_skip = defaultdict(int)
    for p in list(PKG.rglob("*.py")) + list((ROOT / "tests").rglob("*.py")) + list((ROOT / "bench").rglob("*.py")):
        if p == Path(__file__).resolve():
            continue
        parts = p.relative_to(ROOT).parts
        where = parts[0]
        fmt_skip[where] += p.read_text().count("# fmt: " + "skip")
    env_named, env_read, kforge_read = set(), set(), set()
    names: set[str] = set()
    for m, p in mods.items():
        text = p.read_text()
        found = set(re.findall(r"KFORGE_[A-Z0-9_]+", text))
        if found:
            env_named.add(m)
            names |= found
        if re.search(r"os\.environ|os\.getenv|getenv\(", text):
            env_read.add(m)
        if re.search(
            r'(environ\.get|getenv|_int_env|env\.get)\(\s*"KFORGE_|environ\[\s*"KFORGE_|environ\.get\(TOKEN_ENV', text
        ):
            kforge_read.add(m)

    print("# Package structure\n")
    print(f"- modules: {len(mods)}; lines: {sum(lines.values())}")
    cs = circles(graph)
    print(f"- import circles: {len(cs)}")
    for c in cs:
        print(f"  - {' <-> '.join(c)}")
    print(f"- upward imports (a floor importing one above it): {len(upward)}")
    for m, d in upward:
        print(f"  - {m} (floor {floor(m)}) -> {d} (floor {floor(d)})")
    over = [(m, n) for m, n in longest if n > 450]
    print(f"- files over 450 lines: {len(over)}")
    for m, n in longest[:10]:
        print(f"  - {n:4d} {mods[m].relative_to(ROOT)}")
    print(f"- `# fmt: skip` comments: {dict(fmt_skip)} (total {sum(fmt_skip.values())})")
    print(
        f"- KFORGE_* names: {len(names)}; modules naming one: {len(env_named)}; "
        f"modules reading os.environ: {len(env_read)} ({', '.join(sorted(env_read))})"
    )
    print(
        f"- modules reading a KFORGE_* variable from the environment themselves: {len(kforge_read)} "
        f"({', '.join(sorted(kforge_read))})"
    )
    print("\nFloors (bottom first): " + "; ".join(f"{i} {n}" for i, n in enumerate(FLOOR_NAMES)))


if __name__ == "__main__":
    main()
