"""`CHAT_AGENT_MCP_CONFIG`: the MCP servers to use, in the `{"mcpServers": {...}}` shape that
Claude Desktop, Cursor, Cline and LibreChat read (or VS Code's `{"servers": {...}}`).

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv"],
                  "env": {"LOG_LEVEL": "warn"}},
        "search": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${SEARCH_TOKEN}"}}
    }}

`${VAR}` in `env`, `headers` and `url` is read from our environment, so secrets stay out of
the file. A file that cannot be read or has the wrong shape is a start-up error.

Other clients' keys, so that a file copied from them works: `disabled: true` skips the
server; `timeout` bounds each call of its tools, in seconds as Cline and Roo Code write it
(a number above 3600 is milliseconds, as Claude Code and LibreChat write it); `autoApprove`
and `alwaysAllow` are read and reported as ignored, since whether a tool waits for the user
is the server's policy (`CHAT_AGENT_REQUIRE_APPROVAL`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from chat_agent.config import ConfigError

SERVER_NAME = re.compile(r"^[a-zA-Z0-9-]+(_[a-zA-Z0-9-]+)*$")  # no "__": it separates server from tool
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Keys of other clients' configurations that we read and do not act on, with why.
_IGNORED = {key: "whether a tool waits for the user's approval is the server's policy (CHAT_AGENT_REQUIRE_APPROVAL)"
            for key in ("autoApprove", "alwaysAllow")}
_COMMON = {"type", "transport", "disabled", "timeout", *_IGNORED}
_LONGEST_SECONDS = 3600  # Cline's and Roo Code's largest timeout; past it, a number is milliseconds

logger = logging.getLogger("chat_agent.tools.mcp")


@dataclass(frozen=True, slots=True)
class StdioServer:
    """A server we start as a child process and talk to over its stdin and stdout."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    timeout: float | None = None  # seconds per call; None: the registry's default


@dataclass(frozen=True, slots=True)
class HttpServer:
    """A server reached over streamable HTTP."""

    name: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: float | None = None


ServerSpec = StdioServer | HttpServer


def load_config(path: Path, environ: Mapping[str, str] | None = None) -> list[ServerSpec]:
    environ = os.environ if environ is None else environ
    where = f"CHAT_AGENT_MCP_CONFIG ({path})"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{where}: not valid JSON: {exc}") from None
    servers = _servers(data)
    if servers is None:
        raise ConfigError(f'{where}: expected {{"mcpServers": {{name: {{...}}}}}} (or VS Code\'s {{"servers": ...}}) '
                          "at the top level")
    specs = []
    for name, entry in servers.items():
        if isinstance(entry, dict) and entry.get("disabled") is True:
            logger.info("%s: server %r is disabled there: not started", where, name)
            continue
        specs.append(_server(f"{where}: server {name!r}", name, entry, environ))
    return specs


def _servers(data: Any) -> dict | None:
    if not isinstance(data, dict):
        return None
    servers = data.get("mcpServers", data.get("servers"))
    return servers if isinstance(servers, dict) else None


def _server(where: str, name: str, entry: Any, environ: Mapping[str, str]) -> ServerSpec:
    if not SERVER_NAME.match(name) or len(name) > 40:
        raise ConfigError(f"{where}: a name is 1 to 40 letters, digits, '-' or single '_' "
                          "(its tools are called NAME__TOOL)")
    if not isinstance(entry, dict) or ("command" in entry) == ("url" in entry):
        raise ConfigError(f'{where}: give either "command" (with optional "args", "env", "cwd") or "url" '
                          '(with optional "headers")')
    if str(entry.get("type", entry.get("transport", ""))).lower() == "sse":
        raise ConfigError(f"{where}: the old SSE transport is not supported; give the server's streamable "
                          "HTTP endpoint (usually .../mcp)")
    if not isinstance(entry.get("disabled", False), bool):
        raise ConfigError(f"{where}: disabled must be true or false")
    for key in sorted(_IGNORED.keys() & entry.keys()):
        logger.warning("%s: %s is ignored: %s", where, key, _IGNORED[key])
    timeout = _timeout(where, entry.get("timeout"))
    if "url" in entry:
        url = _string(where, "url", entry["url"], environ)
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"{where}: url must start with http:// or https://")
        _only(where, entry, {"url", "headers", *_COMMON})
        return HttpServer(name, url, _strings(where, "headers", entry.get("headers", {}), environ), timeout)
    _only(where, entry, {"command", "args", "env", "cwd", *_COMMON})
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError(f"{where}: args must be a list of strings")
    cwd = entry.get("cwd")
    return StdioServer(name, _string(where, "command", entry["command"], environ), tuple(args),
                       _strings(where, "env", entry.get("env", {}), environ),
                       _string(where, "cwd", cwd, environ) if cwd is not None else None, timeout)


def _timeout(where: str, value: Any) -> float | None:
    """Seconds per call; a number past an hour is taken as milliseconds (see the module doc)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{where}: timeout must be a positive number of seconds")
    seconds = float(value) / 1000 if value > _LONGEST_SECONDS else float(value)
    logger.info("%s: each tool call may take %g s (timeout %g)", where, seconds, value)
    return seconds


def _only(where: str, entry: dict, allowed: set[str]) -> None:
    extra = sorted(set(entry) - allowed)
    if extra:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(extra)} (allowed: {', '.join(sorted(allowed))})")


def _strings(where: str, key: str, value: Any, environ: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: {key} must be an object of strings")
    return {str(k): _string(where, f"{key}.{k}", v, environ) for k, v in value.items()}


def _string(where: str, key: str, value: Any, environ: Mapping[str, str]) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: {key} must be a non-empty string")

    def variable(match: re.Match[str]) -> str:
        if match.group(1) not in environ:
            raise ConfigError(f"{where}: {key} uses ${{{match.group(1)}}}, which is not set")
        return environ[match.group(1)]

    return _VARIABLE.sub(variable, value)
