"""Render the generation agent's prompts from the Jinja2 templates in prompts/<target>/.

Each target has ``first.j2`` (the first attempt), ``repair.j2`` (fix a candidate that failed to
compile, crashed, or gave wrong results) and ``optimize.j2`` (make a correct one faster from the
profile and the analysis agent's advice), all extending ``prompts/_base.j2``. The one-shot example
of a target is a shipped candidate: prompts/<target>/one_shot.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import jinja2

from kforge_mcp.core.errors import InputError
from kforge_mcp.core.settings import Settings
from kforge_mcp.targets import TARGETS

# shipped inside the package so an installed wheel has them; one_shot*.py link to files in examples/
SHIPPED_PROMPTS = Path(__file__).resolve().parents[1] / "prompts"
PROMPTS_DIR = SHIPPED_PROMPTS  # KFORGE_PROMPTS_DIR where a root's settings name one (``use``)
Kind = Literal["first", "repair", "optimize"]
KINDS = ("first", "repair", "optimize")

_env: jinja2.Environment | None = None


def use(settings: Settings) -> None:
    """A root's settings: the templates are read from their prompts_dir (KFORGE_PROMPTS_DIR), else the shipped ones."""
    global PROMPTS_DIR, _env
    folder = settings.prompts_dir or SHIPPED_PROMPTS
    if folder != PROMPTS_DIR:
        PROMPTS_DIR, _env = folder, None


def environment() -> jinja2.Environment:
    global _env
    if _env is None:
        _env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(PROMPTS_DIR)),
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True,
            autoescape=False,
        )
    return _env


def targets_with_prompts() -> list[str]:
    if not PROMPTS_DIR.is_dir():
        return []
    return sorted(p.name for p in PROMPTS_DIR.iterdir() if p.is_dir() and (p / "first.j2").is_file())


def one_shot(target: str) -> tuple[str, str] | None:
    """The project's one-shot example for a target: prompts/<target>/one_shot.py solves the
    problem in prompts/<target>/one_shot_problem.py, or in prompts/one_shot_problem.py."""
    candidate = PROMPTS_DIR / target / "one_shot.py"
    problem = PROMPTS_DIR / target / "one_shot_problem.py"
    problem = problem if problem.is_file() else PROMPTS_DIR / "one_shot_problem.py"
    if not (problem.is_file() and candidate.is_file()):
        return None
    return problem.read_text(), candidate.read_text()


def device_facts(target: str, status=None) -> str:
    """A short paragraph about where the kernels will run (from list_targets' TargetStatus)."""
    if status is None:
        return f"Target {target}; device facts unknown."
    devices = ", ".join(status.devices) or "none"
    parts = [f"Target {target}, devices here: {devices}."]
    if status.versions:
        parts.append("Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(status.versions.items())) + ".")
    if target in TARGETS:
        parts += TARGETS[target].prompt_facts(status)
    parts.extend(status.notes)
    return " ".join(parts)


def _title(target: str) -> str:
    return TARGETS[target].title if target in TARGETS else target


def render(
    kind: Kind,
    target: str,
    problem: str,
    *,
    previous: str | None = None,
    feedback: str | None = None,
    attempt_index: int | None = None,
    speedup: float | None = None,
    device: str | None = None,
    reference_impl: str | None = None,
    reference_target: str | None = None,
    include_one_shot: bool = True,
) -> str:
    """The prompt text for one pass. ``problem`` is the reference's source text."""
    if kind not in KINDS:
        raise InputError(f"prompt kind must be one of {list(KINDS)}, got '{kind}'")
    if target not in targets_with_prompts():
        raise InputError(
            f"no prompt templates for target '{target}'; templates exist for: "
            f"{', '.join(targets_with_prompts()) or 'none'} (add prompts/{target}/first.j2, repair.j2, optimize.j2)"
        )
    shot = one_shot(target) if include_one_shot else None
    template = environment().get_template(f"{target}/{kind}.j2")
    return (
        template.render(
            target=target,
            target_title=_title(target),
            problem=problem.strip(),
            device_facts=device or f"Target {target}; device facts unknown.",
            one_shot_problem=shot[0].strip() if shot else None,
            one_shot=shot[1].strip() if shot else None,
            reference_impl=reference_impl.strip() if reference_impl else None,
            reference_target=reference_target,
            previous=(previous or "").strip(),
            feedback=(feedback or "").strip(),
            attempt_index=attempt_index,
            speedup="unknown" if speedup is None else f"{speedup:.3g}x",
        ).strip()
        + "\n"
    )
