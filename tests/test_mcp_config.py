"""CHAT_AGENT_MCP_CONFIG files as other clients write them: read, with what they say and we do
not act on reported, and what is wrong still refused with one clear line."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from chat_agent.config import ConfigError
from chat_agent.tooling.mcp.config import HttpServer, StdioServer, load_config


def load(tmp_path: Path, config: dict, environ: dict | None = None):
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(config))
    return load_config(path, environ or {})


def test_a_cline_file_loads_with_its_own_keys(tmp_path, caplog):
    caplog.set_level(logging.INFO, "chat_agent.tools.mcp")
    specs = load(tmp_path, {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "server-filesystem", "/srv"], "disabled": False, "timeout": 60,
                  "autoApprove": ["read_file"]},
        "roo": {"command": "uvx", "args": ["mcp-server-git"], "alwaysAllow": ["git_status"], "timeout": 300},
        "off": {"command": "${NOT_SET}", "disabled": True},  # skipped before anything of it is read
    }})
    assert specs == [StdioServer("files", "npx", ("-y", "server-filesystem", "/srv"), timeout=60.0),
                     StdioServer("roo", "uvx", ("mcp-server-git",), timeout=300.0)]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'files': autoApprove is ignored" in m and "CHAT_AGENT_REQUIRE_APPROVAL" in m for m in warned)
    assert any("'roo': alwaysAllow is ignored" in m for m in warned)
    assert any("'off' is disabled there" in r.getMessage() for r in caplog.records)


def test_vs_codes_servers_shape_and_millisecond_timeouts(tmp_path):
    specs = load(tmp_path, {"inputs": [], "servers": {
        "web": {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"X-Key": "${KEY}"},
                "timeout": 30000},
        "local": {"type": "stdio", "command": "node", "args": ["server.js"], "timeout": 3600},
    }}, {"KEY": "k"})
    assert specs == [HttpServer("web", "https://mcp.example.com/mcp", {"X-Key": "k"}, timeout=30.0),
                     StdioServer("local", "node", ("server.js",), timeout=3600.0)]


@pytest.mark.parametrize("entry, message", [
    ({"command": "x", "timeout": 0}, "timeout must be a positive number of seconds"),
    ({"command": "x", "timeout": "60"}, "timeout must be a positive number of seconds"),
    ({"command": "x", "disabled": "yes"}, "disabled must be true or false"),
    ({"command": "x", "comand": "y"}, "unknown key\\(s\\) comand"),
    ({"url": "https://x/sse", "type": "sse"}, "old SSE transport is not supported"),
])
def test_what_is_wrong_still_stops_the_start(tmp_path, entry, message):
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, {"mcpServers": {"s": entry}})


def test_a_file_with_neither_shape_is_refused(tmp_path):
    with pytest.raises(ConfigError, match='expected {"mcpServers".*"servers"'):
        load(tmp_path, {"context_servers": {}})
