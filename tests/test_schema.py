"""`GET /api/protocol` is one JSON Schema document (PROTOCOL.md 1.1), and the frames a real
turn produces are valid against it."""

from __future__ import annotations

import json
from typing import Any, Iterator

import jsonschema
import pytest
from jsonschema import Draft202012Validator

from tests.fakes.anthropic_fake import Reply, ToolUse
from tests.support import connect, recv, send, until


@pytest.fixture(scope="module")
def schema(server) -> dict[str, Any]:
    status, document = server.get("/api/protocol")
    assert status == 200
    return document


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from refs(item)


def validator(schema: dict[str, Any], union: str) -> Draft202012Validator:
    return Draft202012Validator({"$defs": schema["$defs"], "$ref": f"#/$defs/{union}"})


def frame_defs(schema: dict[str, Any], union: str) -> dict[str, dict]:
    return {ref.rsplit("/", 1)[1]: schema["$defs"][ref.rsplit("/", 1)[1]] for ref in
            (member["$ref"] for member in schema["$defs"][union]["oneOf"])}


def test_the_schema_is_one_draft_2020_12_document(schema):
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema" and schema["protocolVersion"] == 1
    assert all(ref.startswith("#/$defs/") and ref.split("/")[2] in schema["$defs"] for ref in refs(schema))
    for union in ("ServerFrame", "ClientFrame"):
        members = frame_defs(schema, union)
        mapping = schema["$defs"][union]["discriminator"]["mapping"]
        assert schema["$defs"][union]["discriminator"]["propertyName"] == "type"
        assert {d["properties"]["type"]["const"]: f"#/$defs/{name}" for name, d in members.items()} == mapping
        assert all("type" in d["required"] for d in members.values()), union
    server = frame_defs(schema, "ServerFrame")
    assert {"session", "content_chunk", "tool_start", "tool_end", "artifact", "done", "error", "pong"} <= {
        d["properties"]["type"]["const"] for d in server.values()}
    # what the server always sends is required; seq only where every such frame has it
    for name, definition in server.items():
        assert "conversationId" in definition["required"], name
        assert ("seq" in definition["required"]) == (name not in ("ErrorFrame", "StatusFrame", "Pong")), name
    assert "seq" not in server["Pong"]["properties"] and "seq" not in server["StatusFrame"]["properties"]
    assert {"state", "detail", "elapsed"} <= set(server["StatusFrame"]["required"])
    assert server["ErrorFrame"]["properties"]["seq"]["type"] == "integer"
    assert {"protocolVersion", "title", "artifact", "messages", "context", "tools", "running"} <= set(
        server["SessionFrame"]["required"])
    assert {"stopReason", "usage", "messageId"} <= set(server["Done"]["required"])
    assert {"inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens"} <= set(
        schema["$defs"]["Usage"]["required"])
    # a client may leave out what has a default
    assert frame_defs(schema, "ClientFrame")["MessageIn"]["required"] == ["type"]


async def test_real_frames_are_valid_against_it(server, schema, fake_anthropic):
    servers, clients = validator(schema, "ServerFrame"), validator(schema, "ClientFrame")
    sent = [{"type": "message", "content": "write", "settings": {"thinking": False}, "id": "m-1"},
            {"type": "ping"}, {"type": "select_artifact_version", "index": 9}, {"type": "resume", "afterSeq": 0}]
    ws, session = await connect(server)
    fake_anthropic.enqueue(Reply([ToolUse("generate_artifact", {"title": "Notes", "type": "text",
                                                                "content": "# Notes\n"})]), Reply("Done."))
    await send(ws, **sent[0])
    frames = [session, *await until(ws, "done")]
    for frame in sent[1:3]:
        await send(ws, **frame)
        frames.append(await recv(ws))
    await ws.send("not json")
    frames.append(await recv(ws))  # an error outside the log: no seq
    await ws.close()
    ws, reopened = await connect(server, session["conversationId"])
    frames.append(reopened)  # with its history and artifact
    await send(ws, **sent[3])
    frames += await until(ws, "done")  # the replay (a connection is sent each seq once: a new one)
    await ws.close()
    kinds = {f["type"] for f in frames}
    assert {"session", "tool_start", "tool_end", "artifact", "content_chunk", "done", "pong", "error"} <= kinds
    for frame in frames:
        servers.validate(frame)
    for frame in sent:
        clients.validate(frame)
    # and the document can say no
    with pytest.raises(jsonschema.ValidationError):
        servers.validate({k: v for k, v in frames[-1].items() if k != "seq"})
    with pytest.raises(jsonschema.ValidationError):
        clients.validate({"type": "resume"})
    assert json.dumps(frames)  # plain JSON all through
