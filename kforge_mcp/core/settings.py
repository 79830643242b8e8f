"""Every KFORGE_* setting, read in one place (pydantic-settings). Code below the entry points
receives a Settings (or one of its values) instead of reading the environment itself.

``Settings.read()`` reads the process environment each time it is called, so a changed variable
(a test's monkeypatch, the pool's worker environment) is seen; ``Settings.read(env)`` reads a
given mapping instead (the environment a worker will get). An empty variable counts as unset.
The pool sets KFORGE_WORKER_LANE, KFORGE_WORKER_TMP, KFORGE_WORKER_MEMORY_MB and KFORGE_SANDBOX_CGROUP for its
workers.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, ValidatorFunctionWrapHandler, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

PREFIX = "KFORGE_"
OFF = ("off", "0", "false", "no")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=PREFIX, env_ignore_empty=True, extra="ignore", populate_by_name=True)

    home: Path = Field(default_factory=lambda: Path.home() / ".kforge", description="engine home: caches, runs")
    executor: str | None = Field(None, description="where jobs run: local (the default) or ray")
    ray_address: str | None = Field(None, description="Ray cluster to join; none: start a local Ray")
    cpu_workers: int | None = Field(
        None, description="workers for CPU-only jobs (local default 2, the second started when needed)"
    )
    worker_memory_mb: int = Field(8192, description="a worker above this is killed (0: no limit)")
    model: str | None = Field(None, description="the LLM provider's model")
    prompts_dir: Path | None = Field(None, description="prompt templates instead of the shipped ones")
    targets: str | None = Field(None, description="more target packages outside kforge_mcp (comma-separated folders)")
    platforms: str | None = Field(
        None, description="more platform (vendor) packages outside kforge_mcp (comma-separated folders)"
    )
    http_token: str | None = Field(None, description="bearer token HTTP clients must send")
    sandbox: str = Field("on", description="'off' turns every protection off")
    sandbox_disable: str = Field("", description="protections to turn off: landlock,network,limits,cgroup")
    sandbox_max_procs: int = Field(1024, description="processes (threads) a worker may have")
    sandbox_nofile: int = Field(4096, description="open files a worker may have")
    sandbox_cpu_s: int = Field(3600, description="CPU seconds per job")
    sandbox_cgroup: str | None = Field(None, description="set by the pool: the worker's pids cgroup")
    cuda_build: str = Field("split", description="CUDA load_inline builds: 'split' (reused parts, seconds) or 'stock'")
    cuda_pch: str = Field("on", description="precompile torch's headers for split CUDA builds: on or off")
    cuda_nvcc_steps: str = Field(
        "side-by-side", description="a split build's kernels: nvcc's host and device steps 'side-by-side' or 'in-turn'"
    )
    gpu_warmup: str = Field(
        "on",
        description="a server warms its first GPU at start (torch.compile's fixed cost, the first profile's "
        "profiler program) and a CPU worker for the compute paths' measurement",
    )
    profile_spare: str = Field(
        "on",
        description="the next metrics profile's profiler program launched ahead, on or off: by a server's warm-up, "
        "by a GPU verify and by each metrics profile (while it waits, up to 10 minutes, it holds a context on the "
        "device)",
    )
    worker_lane: str | None = Field(None, description="set by the pool: the worker's lane")
    worker_tmp: str | None = Field(None, description="set by the pool: the worker's temp dir")
    # the LLM providers' own variables (no KFORGE_ prefix); a worker's environment never holds them
    anthropic_api_key: SecretStr | None = Field(None, validation_alias="ANTHROPIC_API_KEY")
    openai_api_key: SecretStr | None = Field(None, validation_alias="OPENAI_API_KEY")
    anthropic_base_url: str | None = Field(None, validation_alias="ANTHROPIC_BASE_URL")
    openai_base_url: str | None = Field(None, validation_alias="OPENAI_BASE_URL")

    @field_validator("home", "prompts_dir")
    @classmethod
    def _expand(cls, value: Path | None) -> Path | None:
        return value.expanduser() if value is not None else None

    @field_validator("executor")
    @classmethod
    def _lower(cls, value: str | None) -> str | None:
        return value.lower() if value else None

    @field_validator("sandbox_max_procs", "sandbox_nofile", "sandbox_cpu_s", mode="wrap")
    @classmethod
    def _default_when_bad(cls, value, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> int:
        try:  # a sandbox limit that is not a number keeps the default instead of stopping the worker
            return handler(value)
        except ValidationError:
            assert info.field_name is not None  # a field validator always runs for a field
            return cls.model_fields[info.field_name].default

    @classmethod
    def read(cls, env: Mapping[str, str] | None = None) -> Settings:
        if env is None:
            return cls()
        variables = {name: cls.variable(name) for name in cls.model_fields}
        values: dict[str, Any] = {name: env[var] for name, var in variables.items() if env.get(var)}
        return _FromMapping(**values)

    @classmethod
    def variable(cls, name: str) -> str:
        """The environment variable a field is read from: KFORGE_<NAME>, or the provider's own name."""
        alias = cls.model_fields[name].validation_alias
        return alias if isinstance(alias, str) else PREFIX + name.upper()

    def variables(self) -> dict[str, str]:
        """The KFORGE_* values that are set, as the environment holds them: ``Settings.read(variables)`` in a child
        process gives the same settings. The providers' keys stay out."""
        return {
            self.variable(name): str(value)
            for name, value in self
            if value is not None and self.variable(name).startswith(PREFIX)
        }

    def api_key(self, provider: str) -> str | None:
        """The provider's API key (ANTHROPIC_API_KEY, OPENAI_API_KEY); None when unset."""
        key = getattr(self, f"{provider}_api_key", None)
        return key.get_secret_value() if key is not None else None

    @property
    def split_cuda_builds(self) -> bool:
        """CUDA load_inline builds take the split path (targets/cuda_fast_build.py)."""
        return self.cuda_build.strip().lower() == "split"

    @property
    def cuda_pch_on(self) -> bool:
        """Split builds precompile torch's headers."""
        return self.cuda_pch.strip().lower() not in OFF

    @property
    def nvcc_side_by_side(self) -> bool:
        """A split build runs the kernels' nvcc steps as targets/cuda/nvcc_steps.py runs them."""
        return self.cuda_nvcc_steps.strip().lower() != "in-turn"

    @property
    def gpu_warmup_on(self) -> bool:
        return self.gpu_warmup.strip().lower() not in OFF

    @property
    def profile_spare_on(self) -> bool:
        return self.profile_spare.strip().lower() not in OFF

    def sandbox_enabled(self, protection: str) -> bool:
        """Whether one sandbox protection (landlock, network, limits, cgroup) is on."""
        if self.sandbox.strip().lower() in OFF:
            return False
        return protection not in {p.strip().lower() for p in self.sandbox_disable.split(",")}


class _FromMapping(Settings):
    """Settings from the given values only (not the process environment)."""

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, **sources):
        return (init_settings,)
