"""The shape of the repository in figures, and the limits CI holds it to: import circles, imports that
climb back up the floors, the longest files and functions, ``# fmt: skip`` comments, where KFORGE_*
settings are named and read, the size of bench/, and the tests that would read bench/.

    python bench/structure.py               # prints a markdown summary; exits 1 when a failing limit is broken
    python bench/structure.py --root DIR    # the same for another checkout

Every import counts, including the ones inside functions (a lazy import is still a dependency).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Limits:
    file_lines: int = 450  # lines of one product file (kforge_mcp/, less the prompts' one-shot examples)
    function_lines: int = 80  # lines of one product function, from its def
    long_functions: int = 5  # product functions longer than function_lines
    settings_readers: int = 4  # modules that read Settings from the process environment (the roots)
    environ_readers: int = 3  # modules that read or change os.environ themselves
    bench_mb: float = 6.0  # everything under bench/: scripts and the records docs cite; raw captures packed


LIMITS = Limits()
# Files over the line limit the check still lets pass, each until it is split (then remove it from here).
PENDING_LONG_FILES: set[str] = set()
# True: more Settings roots than the limit fail the check like the others (below the roots settings are passed down).
SETTINGS_LIMIT_FAILS = True
SKIP_DIRS = {".git", ".venv", "__pycache__", ".kforge", ".mypy_cache", ".ruff_cache", ".pytest_cache", "node_modules"}


# The floors, bottom (0) to top. A module may import its own floor or any floor below it.
# The first matching prefix wins (so "kforge_mcp.cli" matches before "kforge_mcp").
FLOORS = [
    ("kforge_mcp.core", 0),
    ("kforge_mcp.platforms", 1),
    ("kforge_mcp.devices", 2),
    ("kforge_mcp.targets", 3),
    ("kforge_mcp.runtime", 4),
    ("kforge_mcp.judge", 5),
    ("kforge_mcp.profiling", 6),
    ("kforge_mcp.advice", 7),
    ("kforge_mcp.worker_jobs", 8),
    ("kforge_mcp.store", 9),
    ("kforge_mcp.agents", 9),
    ("kforge_mcp.suite", 10),
    ("kforge_mcp.suite_report", 10),
    ("kforge_mcp.api", 10),
    ("kforge_mcp.engine", 10),
    ("kforge_mcp.prompts", 3),  # one-shot examples: data, imported by nothing at runtime
    ("kforge_mcp.tools", 11),
    ("kforge_mcp.server", 12),
    ("kforge_mcp.http_transport", 13),
    ("kforge_mcp.stdio_transport", 13),
    ("kforge_mcp.cli", 14),
    ("kforge_mcp", 10),  # the package's __init__: the headless API
]
FLOOR_NAMES = [
    "core",
    "platforms",
    "devices",
    "targets",
    "runtime",
    "judge",
    "profiling",
    "advice",
    "worker jobs",
    "store, agents",
    "api, engine, suite, the package's functions",
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


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules(root: Path) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted((root / "kforge_mcp").rglob("*.py"))}


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


def product(mods: dict[str, Path]) -> dict[str, Path]:
    """The package less the prompts' one-shot examples (data shown to a model, as mypy and ruff treat them)."""
    return {m: p for m, p in mods.items() if not m.startswith("kforge_mcp.prompts")}


def long_functions(mods: dict[str, Path], root: Path) -> list[tuple[int, str]]:
    """(lines, where) of every product function over the limit, longest first."""
    found = []
    for p in product(mods).values():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > LIMITS.function_lines:
                    found.append((n, f"{p.relative_to(root)}:{node.lineno} {node.name}"))
    return sorted(found, reverse=True)


def settings_readers(mods: dict[str, Path]) -> list[str]:
    """Product modules that call ``Settings.read()`` on the process environment (``Settings.read(env)``, which
    parses a given mapping, is not a read)."""
    found = []
    for m, p in product(mods).items():
        for node in ast.walk(ast.parse(p.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "read"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "Settings"
                and not node.args
                and not node.keywords
            ):
                found.append(m)
                break
    return sorted(found)


def environ_readers(mods: dict[str, Path]) -> list[str]:
    """Product modules that read or change os.environ (or call getenv) themselves."""
    return sorted(m for m, p in product(mods).items() if re.search(r"os\.environ|os\.getenv|getenv\(", p.read_text()))


def repository_files(root: Path, under: str = "") -> list[Path]:
    """The files a checkout holds (git's tracked and untracked-but-not-ignored ones), else every file less caches."""
    try:
        out = subprocess.run(
            [
                "git",
                "-C",
                str(root),
                "ls-files",
                "-z",
                "--cached",
                "--others",
                "--exclude-standard",
                "--",
                under or ".",
            ],
            capture_output=True,
            check=True,
        ).stdout
        files = [root / f for f in out.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = [f for f in (root / under).rglob("*") if not SKIP_DIRS & set(f.relative_to(root).parts)]
    return [f for f in files if f.is_symlink() or f.is_file()]


def megabytes(files: list[Path]) -> float:
    return sum(f.lstat().st_size for f in files) / 1e6  # a link counts as itself, not as what it points to


def is_doc(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def bench_reads(path: Path, bench_modules: set[str]) -> list[str]:
    """Where a test file imports a bench/ module or names a path under bench/ (docstrings and comments aside)."""
    try:
        tree = ast.parse(path.read_text())
    except SyntaxError:  # a candidate that must not compile (tests/candidates/syntax_error.py)
        return []
    docs = {id(n.value) for n in ast.walk(tree) if is_doc(n)}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        found += [(node.lineno, f"imports {n}") for n in names if n.split(".")[0] in bench_modules]
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if node.value.startswith("bench/") or "/bench/" in node.value:
                found.append((node.lineno, f"names {node.value!r}"))
        parts: list[ast.expr] = []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            parts = [node.left, node.right]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in PATH_CALLS:
            parts = list(node.args)
        if any(isinstance(a, ast.Constant) and a.value == "bench" for a in parts):
            found.append((node.lineno, "a path through bench/"))
    return [f"line {line}: {what}" for line, what in sorted(set(found))]


PATH_CALLS = {"Path", "PurePath", "join", "joinpath"}
BENCH_DATA = {"candidates", "problems", "results"}  # kernel sources and records, loaded by path, never imported


def tests_reading_bench(root: Path) -> dict[str, list[str]]:
    tests = root / "tests"
    own = {p.stem for p in tests.rglob("*.py")}
    scripts = [p for p in (root / "bench").rglob("*.py") if not BENCH_DATA & set(p.relative_to(root).parts)]
    bench_modules = {"bench"} | {p.stem for p in scripts} - own
    out = {}
    for p in sorted(tests.rglob("*.py")):
        if found := bench_reads(p, bench_modules):
            out[str(p.relative_to(root))] = found
    return out


def stale_digests(root: Path) -> list[str] | None:
    """The tests' digests that differ from what bench/digests.py derives; None where the checkout has none."""
    script = root / "bench" / "digests.py"
    if not script.is_file():
        return None
    spec = importlib.util.spec_from_file_location("digests", script)
    assert spec and spec.loader
    digests = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(digests)
    return digests.stale(digests.derive())


def figures(root: Path) -> None:
    mods = modules(root)
    known = set(mods)
    # the package __init__ is imported by every submodule anyway; its lazy re-exports are not a dependency
    graph = {m: (imports(m, p, known) - {"kforge_mcp"}) for m, p in mods.items()}
    upward = sorted((m, d) for m, ds in graph.items() for d in ds if floor(d) > floor(m))
    lines = {m: len(p.read_text().splitlines()) for m, p in mods.items()}
    longest = sorted(lines.items(), key=lambda kv: -kv[1])
    fmt_skip: dict[str, int] = defaultdict(int)
    for where in ("kforge_mcp", "tests", "bench"):
        for p in (root / where).rglob("*.py"):
            if p.resolve() != Path(__file__).resolve():
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

    print(f"- modules: {len(mods)}; lines: {sum(lines.values())}")
    cs = circles(graph)
    print(f"- import circles: {len(cs)}")
    for c in cs:
        print(f"  - {' <-> '.join(c)}")
    print(f"- upward imports (a floor importing one above it): {len(upward)}")
    for m, d in upward:
        print(f"  - {m} (floor {floor(m)}) -> {d} (floor {floor(d)})")
    print("- the longest files:")
    for m, n in longest[:10]:
        print(f"  - {n:4d} {mods[m].relative_to(root)}")
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


def limits(root: Path) -> bool:
    """Print each limit and what breaks it; whether a failing one is broken."""
    mods = modules(root)
    repo, bench = repository_files(root), repository_files(root, "bench")
    print(f"- repository: {megabytes(repo):.1f} MB in {len(repo)} files")
    rules: list[tuple[str, bool, bool, list[str]]] = []  # name, broken, fails the check, what breaks it
    over = sorted(
        ((n, p) for p in product(mods).values() if (n := len(p.read_text().splitlines())) > LIMITS.file_lines),
        reverse=True,
    )
    pending = {str(p.relative_to(root)) for _, p in over} & PENDING_LONG_FILES
    rules.append(
        (
            f"product files over {LIMITS.file_lines} lines: {len(over)} (limit 0; pending a split: "
            f"{', '.join(sorted(pending)) or 'none'})",
            len(over) > len(pending),
            True,
            [f"{n:4d} {p.relative_to(root)}" for n, p in over],
        )
    )
    long = long_functions(mods, root)
    rules.append(
        (
            f"product functions over {LIMITS.function_lines} lines: {len(long)} (limit {LIMITS.long_functions})",
            len(long) > LIMITS.long_functions,
            True,
            [f"{n:4d} {where}" for n, where in long],
        )
    )
    readers = settings_readers(mods)
    rules.append(
        (
            f"modules that read Settings from the environment: {len(readers)} (limit {LIMITS.settings_readers})",
            len(readers) > LIMITS.settings_readers,
            SETTINGS_LIMIT_FAILS,
            readers,
        )
    )
    environ = environ_readers(mods)
    rules.append(
        (
            f"modules that read or change os.environ: {len(environ)} (limit {LIMITS.environ_readers})",
            len(environ) > LIMITS.environ_readers,
            True,
            environ,
        )
    )
    bench_mb = megabytes(bench)
    biggest = sorted(bench, key=lambda f: -f.lstat().st_size)[:5]
    rules.append(
        (
            f"bench/: {bench_mb:.2f} MB in {len(bench)} files (limit {LIMITS.bench_mb:g} MB)",
            bench_mb > LIMITS.bench_mb,
            True,
            [f"{f.lstat().st_size / 1e6:.2f} MB {f.relative_to(root)} (largest)" for f in biggest],
        )
    )
    reading = tests_reading_bench(root)
    rules.append(
        (
            f"test files that import or read bench/: {len(reading)} (limit 0)",
            bool(reading),
            True,
            [f"{f}: {'; '.join(found)}" for f, found in reading.items()],
        )
    )
    stale = stale_digests(root)
    if stale is not None:
        rules.append(
            (
                f"tests/data digests that differ from bench/ (`python bench/digests.py` derives them): {len(stale)}",
                bool(stale),
                True,
                stale,
            )
        )
    failed = False
    for name, broken, fails, details in rules:
        verdict = ("FAIL" if fails else "over (reported)") if broken else "ok"
        failed |= broken and fails
        print(f"- {verdict}: {name}")
        for d in details:
            print(f"  - {d}")
    return failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=HERE.parent, help="the checkout to measure (this one)")
    root = ap.parse_args(argv).root.resolve()
    print("# Repository structure\n")
    figures(root)
    print("\n## Limits\n")
    failed = limits(root)
    print(f"\n{'FAIL' if failed else 'PASS'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
