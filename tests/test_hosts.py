"""The server as MCP hosts start it: the README's snippets exactly as written, the spec's error
codes for unknown names, tool annotations, and nothing left behind in /tmp."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, example, problem
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

pytestmark = pytest.mark.anyio

KFORGE_MCP = Path(sys.executable).parent / "kforge-mcp"  # the venv's, as `pip install` puts it there
PLACEHOLDERS = ("/absolute/path/to/your/kernels", "${workspaceFolder}", "$PWD")
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"  # what a host started from a desktop session has, no venv in it


def fenced_blocks() -> list[tuple[str, str]]:
    """(language, text) of every fenced block under README's "Connecting a client"."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Connecting a client", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(\w+)\n(.*?)```", section, re.S)


def client_snippets() -> list[tuple[str, str]]:
    """The blocks a host reads: JSON configs and `claude mcp add` lines."""
    return [(lang, text) for lang, text in fenced_blocks() if lang == "json" or text.lstrip().startswith("claude ")]


def setup_commands() -> list[str]:
    """The shell blocks a user runs first, in the checkout, to put kforge-mcp on PATH."""
    return [text for lang, text in fenced_blocks() if lang == "bash" and not text.lstrip().startswith("claude ")]


def snippet_argv(language: str, text: str, folder: Path) -> list[str]:
    """The command line a host runs for this snippet, with the kernels' folder put in."""
    for placeholder in PLACEHOLDERS:
        text = text.replace(placeholder, str(folder))
    if language == "json":
        config = json.loads(text)
        servers = config.get("mcpServers") or config["servers"]  # Claude Desktop, Cursor / VS Code
        entry = servers["kforge"]
        if "servers" in config:
            assert entry["type"] == "stdio"
        return [entry["command"], *entry["args"]]
    assert language == "bash", f"a snippet in {language} that no host reads"
    words = shlex.split(text.strip())
    assert words[:4] == ["claude", "mcp", "add", "kforge"] and "--" in words, text
    return words[words.index("--") + 1 :]


def kernels_folder(tmp_path: Path) -> Path:
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    shutil.copy(problem("row_softmax"), kernels / "row_softmax.py")
    shutil.copy(example("row_softmax", "triton"), kernels / "triton.py")
    return kernels


def host_env(tmp_path: Path, user_home: Path, path: str) -> dict[str, str]:
    """A host's environment: its own HOME and PATH, no venv activated. PYTHONPATH passes through only
    where the tests themselves run from a source tree under it (a worktree sharing another's venv)."""
    env = {"HOME": str(user_home), "PATH": path, "KFORGE_HOME": str(tmp_path / "kforge-home")}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


async def compile_through(argv: list[str], env: dict[str, str], cwd: Path, kernels: Path) -> None:
    """Start the server as a host does (the command as written, resolved on the host's PATH, in the
    host's folder) and compile a kernel that lies in the allowed folder."""
    params = StdioServerParameters(command=argv[0], args=list(argv[1:]), env=env, cwd=str(cwd))
    async with Client(params, mode="legacy") as client:
        result = await client.call_tool(
            "compile", {"target": "triton", "source": str(kernels / "triton.py"), "wait_s": 600}
        )
        assert not result.is_error, result.content
        assert result.structured_content["ok"], result.structured_content


async def test_every_readme_snippet_works_after_the_documented_setup(tmp_path):
    kernels = kernels_folder(tmp_path)
    elsewhere = tmp_path / "host-cwd"  # hosts start the server in a folder of their own
    elsewhere.mkdir()
    user_home = tmp_path / "user"  # a user whose ~/.local/bin holds nothing yet
    user_home.mkdir()
    path = f"{user_home}/.local/bin:{SYSTEM_PATH}"
    assert shutil.which("kforge-mcp", path=path) is None  # without the setup no host would find it
    setup = setup_commands()
    assert setup, "the host section gives no setup that puts kforge-mcp on PATH"
    for command in setup:  # run in the checkout, as written; its .venv is the one these tests run in
        command = command.replace('"$PWD/.venv', f'"{sys.prefix}')
        done = subprocess.run(
            ["bash", "-euc", command],
            cwd=ROOT,
            env={"HOME": str(user_home), "PATH": SYSTEM_PATH},
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
    assert shutil.which("kforge-mcp", path=path), "the setup did not put kforge-mcp on PATH"
    snippets = client_snippets()
    assert len(snippets) == 4, snippets  # Claude Desktop, Claude Code, Cursor, VS Code
    argvs = [snippet_argv(language, text, kernels) for language, text in snippets]
    for argv in argvs:
        assert argv[0] == "kforge-mcp" and str(kernels) in argv, argv
    for argv in {tuple(a) for a in argvs}:  # identical command lines need one run
        await compile_through(list(argv), host_env(tmp_path, user_home, path), elsewhere, kernels)


async def test_the_absolute_path_kforge_serve_prints_works_as_the_command(tmp_path):
    kernels = kernels_folder(tmp_path)
    served = subprocess.run(
        [sys.executable, "-m", "kforge_mcp.cli", "serve", "--home", str(tmp_path / "kforge-home")],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    launcher = re.search(r"^command: (\S+)", served.stderr, re.M)
    assert launcher, served.stderr
    assert Path(launcher.group(1)).is_absolute()
    language, text = client_snippets()[0]  # Claude Desktop's, with the printed path as its command
    argv = [launcher.group(1), *snippet_argv(language, text, kernels)[1:]]
    await compile_through(argv, host_env(tmp_path, tmp_path, SYSTEM_PATH), tmp_path, kernels)


def stdio_params(tmp_path: Path, **env: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=str(KFORGE_MCP),
        args=["--allow-dir", str(ROOT)],
        env={**os.environ, "KFORGE_HOME": str(tmp_path / "home"), **env},
        cwd=str(tmp_path),
    )


async def test_unknown_prompt_or_resource_is_invalid_params_and_the_server_serves_on(tmp_path):
    log = tmp_path / "server.log"
    with log.open("w") as errlog:
        async with Client(stdio_client(stdio_params(tmp_path), errlog=errlog), mode="legacy") as client:
            for ask in (
                lambda: client.get_prompt("no_such_prompt", {}),
                lambda: client.read_resource("kforge://no/such/thing"),
                lambda: client.read_resource("kforge://runs/no-such-run"),
                lambda: client.read_resource("ui://kforge/no-such-view"),
            ):
                with pytest.raises(MCPError) as raised:
                    await ask()
                assert raised.value.code == INVALID_PARAMS, raised.value.error
            assert len((await client.list_tools()).tools) == 13  # still serving
    text = log.read_text()
    assert "Traceback" not in text and "ERROR" not in text, text
    for name in ("no_such_prompt", "no-such-run", "no-such-view"):  # one line each, for whoever reads the log
        assert len([line for line in text.splitlines() if name in line]) == 1, text


async def test_every_tool_carries_annotations(server):
    async with Client(server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    for tool in tools.values():
        a = tool.annotations
        assert a is not None, tool.name
        hints = (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint)
        assert None not in hints, (tool.name, a)
    for name in ("list_targets", "compile", "analyze_profile", "job_status", "job_result"):
        assert tools[name].annotations.read_only_hint and tools[name].annotations.idempotent_hint, name
    for name in ("verify", "profile", "verify_batch", "bench"):
        assert not tools[name].annotations.read_only_hint and not tools[name].annotations.destructive_hint, name
    assert tools["job_cancel"].annotations.destructive_hint


@pytest.mark.parametrize("calls", [0, 1], ids=["hung-up-at-once", "list-tools"])
async def test_a_stdio_session_without_jobs_leaves_no_temp_folder(tmp_path, calls):
    own_tmp = tmp_path / "tmp"  # the server's temp dir, so other processes' folders do not count
    own_tmp.mkdir()
    async with Client(stdio_params(tmp_path, TMPDIR=str(own_tmp)), mode="legacy") as client:
        if calls:
            await client.list_tools()
    left = list(own_tmp.glob("kforge-workers-*"))
    assert not left, [sorted(p.rglob("*")) for p in left]
