"""Several real server processes on one PostgreSQL schema, their files in one S3 bucket (moto's
server): the fixtures of the end-to-end tests of several instances. A test module imports the
fixtures it uses:

    from tests.instances import instances, moto, s3_env  # noqa: F401  (fixtures)
"""

from __future__ import annotations

import os
import uuid

import pytest

from tests.fakes.s3_server import MotoS3, MotoUnavailable

REDIS_URL = os.environ.get("CHAT_AGENT_TEST_REDIS", "redis://127.0.0.1:6379/0")
REQUIRED = os.environ.get("CHAT_AGENT_REQUIRE_SERVICES") == "1"


def redis_or_skip() -> str:
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
    except Exception as exc:
        if REQUIRED:
            pytest.fail(f"Redis at {REDIS_URL} is unreachable ({exc}) and CHAT_AGENT_REQUIRE_SERVICES=1")
        pytest.skip(f"Redis at {REDIS_URL} is unreachable ({exc})")
    return REDIS_URL


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    try:
        server = MotoS3(tmp_path_factory.mktemp("moto")).__enter__()
    except MotoUnavailable as exc:
        if REQUIRED:
            pytest.fail(f"several instances keep files in S3, and moto's server is unavailable: {exc}")
        pytest.skip(f"several instances keep files in S3, and moto's server is unavailable: {exc}")
    yield server
    server.__exit__()


@pytest.fixture
def s3_env(moto) -> dict[str, str]:
    """A fresh bucket, and the settings that point every instance at it."""
    bucket = f"instances-{uuid.uuid4().hex[:12]}"
    moto.create_bucket(bucket)
    return {**moto.env, "CHAT_AGENT_S3_BUCKET": bucket, "CHAT_AGENT_S3_ENDPOINT_URL": moto.endpoint_url}


# Connections each instance's pools open at most (CHAT_AGENT_DATABASE_POOL_SIZE): with the
# default, three or four instances of one test, and another worker's at the same time, could
# open more than PostgreSQL's 100 on a busy machine, where pools grow to their limit.
POOL_SIZE = 3


def _instances(bus: str, make_server, tmp_path, pg_url, s3_env):
    # Named, so that a test can count their connections (pg_stat_activity.application_name).
    name = f"chat-agent-{uuid.uuid4().hex[:8]}"
    env = {"CHAT_AGENT_DATABASE_URL": f"{pg_url}&application_name={name}",
           "CHAT_AGENT_DATABASE_POOL_SIZE": str(POOL_SIZE), **s3_env}
    if bus == "redis":
        env["CHAT_AGENT_REDIS_URL"] = redis_or_skip()

    def start(n: int, **more: str) -> list:
        return [make_server(tmp_path / f"data-{uuid.uuid4().hex[:6]}", **env, **more) for _ in range(n)]

    start.url = pg_url  # type: ignore[attr-defined]
    start.application_name = name  # type: ignore[attr-defined]
    start.env = env  # type: ignore[attr-defined]
    return start


@pytest.fixture
def instances(make_server, tmp_path, pg_url, s3_env):
    """`instances(n, **env)`: n servers on one fresh PostgreSQL schema, the bus PostgreSQL's
    LISTEN/NOTIFY, their files in one S3 bucket; `instances.url` is the schema's URL."""
    return _instances("postgres", make_server, tmp_path, pg_url, s3_env)


@pytest.fixture(params=["postgres", "redis"])
def instances_any_bus(request, make_server, tmp_path, pg_url, s3_env):
    """`instances`, once with each bus (Redis: CHAT_AGENT_REDIS_URL). The bus only carries
    frames and commands, so the tests of what travels on it run on both; the others on one."""
    return _instances(request.param, make_server, tmp_path, pg_url, s3_env)


def stored_conversation(server) -> str:
    """A new, empty conversation that every instance can open at once. One opened over the
    WebSocket is stored only with its first message (PROTOCOL 1.2), so it is made here as
    the import of an empty export."""
    status, body = server.request("POST", "/api/conversations/import",
                                  body={"format": "chat-agent.conversation", "version": 1, "messages": []})
    assert status == 201, body
    return body["id"]
