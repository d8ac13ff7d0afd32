"""Settings read from the environment once, at start-up, and passed down explicitly."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

DEFAULT_MODEL = "claude-sonnet-4-6"
DEFAULT_SMALL_MODEL = "claude-haiku-4-5"
# Model providers by the prefix a model name may carry (`openai:gpt-4.1`), each with the
# variable that holds its key. A bare name is Anthropic's.
PROVIDERS: dict[str, str] = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
DEFAULT_PROVIDER = "anthropic"


class ConfigError(ValueError):
    """A setting has a value the server cannot run with."""


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None


def _positive(env: Mapping[str, str], name: str, default: int) -> int:
    value = _int(env, name, default)
    if value <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {value}")
    return value


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    value = _float(env, name, default)
    if not value > 0:  # NaN too
        raise ConfigError(f"{name} must be a positive number of seconds, got {value}")
    return value


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _api_keys(raw: str) -> dict[str, str]:
    """`user:token,user2:token2` → {token: user}; tokens are what clients present."""
    keys: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in raw.split(","))):
        user, sep, token = pair.partition(":")
        if not sep or not user.strip() or not token.strip():
            raise ConfigError("CHAT_AGENT_API_KEYS must look like 'user:token,user2:token2'")
        keys[token.strip()] = user.strip()
    return keys


def split_model(name: str) -> tuple[str, str]:
    """`openai:gpt-4.1` → ("openai", "gpt-4.1"); a bare name → ("anthropic", name). Only the
    first colon counts, so `openai:llama3.2:3b` keeps the tag of an Ollama model.
    Raises ValueError for an unknown prefix or an empty name."""
    prefix, sep, rest = name.partition(":")
    if not sep:
        provider, bare = DEFAULT_PROVIDER, name
    elif prefix in PROVIDERS:
        provider, bare = prefix, rest
    else:
        raise ValueError(f"{name!r} starts with an unknown provider {prefix!r} (known: {', '.join(PROVIDERS)}); "
                         f"a model whose own name has a colon is written with its provider, like openai:{name}")
    if not bare.strip():
        raise ValueError(f"{name!r} names no model")
    return provider, bare


def _checked_model(name: str, model: str) -> str:
    try:
        split_model(model)
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None
    return model


def _model(env: Mapping[str, str], name: str, default: str) -> str:
    """A model name from a variable, checked: an unknown provider stops the start."""
    return _checked_model(name, env.get(name, "").strip() or default)


def _list(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in env.get(name, "").split(",") if item.strip())


# An origin is what a browser sends: scheme://host[:port], here also with `:*` for any port.
_ORIGIN = re.compile(r"https?://([^\s/:\[\]*]+|\[[0-9a-f:.]+\])(:(\d+|\*))?", re.IGNORECASE)
# A host without a port, as Starlette's TrustedHostMiddleware matches it: `*`, `*.example.com`, `[::1]`.
_HOST = re.compile(r"\*|(\*\.)?[^\s/:\[\]*]+|\[[0-9a-f:.]+\]", re.IGNORECASE)


def _origins(env: Mapping[str, str]) -> tuple[str, ...]:
    origins = _list(env, "CHAT_AGENT_ALLOWED_ORIGINS")
    for origin in origins:
        if origin not in ("*", "null") and not _ORIGIN.fullmatch(origin):
            raise ConfigError(f"CHAT_AGENT_ALLOWED_ORIGINS: {origin!r} is not an origin like "
                              "https://app.example.com or http://localhost:* (no path, no trailing slash)")
    return origins


def _hosts(env: Mapping[str, str]) -> tuple[str, ...]:
    hosts = tuple(h.lower() for h in _list(env, "CHAT_AGENT_ALLOWED_HOSTS"))
    for host in hosts:
        if not _HOST.fullmatch(host):
            raise ConfigError(f"CHAT_AGENT_ALLOWED_HOSTS: {host!r} is not a host name like chat.example.com, "
                              "*.example.com, [::1] or * (no scheme, no port)")
    return hosts


def _instance_id(env: Mapping[str, str]) -> str:
    raw = env.get("CHAT_AGENT_INSTANCE_ID", "").strip()
    if raw and not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", raw):
        raise ConfigError("CHAT_AGENT_INSTANCE_ID must be 1 to 32 letters, digits, '-' or '_'")
    return raw


def _approval_timeout(env: Mapping[str, str]) -> float:
    value = _float(env, "CHAT_AGENT_APPROVAL_TIMEOUT", 600.0)
    if value <= 0:
        raise ConfigError(f"CHAT_AGENT_APPROVAL_TIMEOUT must be a positive number of seconds, got {value}")
    return value


def _lease_seconds(env: Mapping[str, str]) -> float:
    value = _float(env, "CHAT_AGENT_LEASE_SECONDS", 10.0)
    if not 1.0 <= value <= 300.0:
        raise ConfigError(f"CHAT_AGENT_LEASE_SECONDS must be between 1 and 300, got {value}")
    return value


# ---- Security and fair use (docs/security.md) ----------------------------------------------------
LIMIT_NAMES = ("turns_per_minute", "tokens_per_day", "sockets", "uploads_per_minute", "upload_bytes_per_day",
               "concurrent_turns")
JWT_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-user quotas (PROTOCOL 1.2 "Quotas"); None: unlimited."""
    turns_per_minute: int | None = None
    tokens_per_day: int | None = None
    sockets: int | None = None
    uploads_per_minute: int | None = None
    upload_bytes_per_day: int | None = None
    concurrent_turns: int | None = None  # ours, beside the protocol's names

    def items(self) -> list[tuple[str, int | None]]:
        return [(name, getattr(self, name)) for name in LIMIT_NAMES]


def _limits(env: Mapping[str, str]) -> Limits:
    """`CHAT_AGENT_LIMITS=turns_per_minute=20,sockets=10`."""
    values: dict[str, int] = {}
    for pair in _list(env, "CHAT_AGENT_LIMITS"):
        name, sep, raw = (part.strip() for part in pair.partition("="))
        if not sep or name not in LIMIT_NAMES:
            raise ConfigError(f"CHAT_AGENT_LIMITS: {pair!r} is not name=value with a name among {', '.join(LIMIT_NAMES)}")
        try:
            value = int(raw.replace("_", ""))
        except ValueError:
            raise ConfigError(f"CHAT_AGENT_LIMITS: {name} must be a whole number, got {raw!r}") from None
        if value <= 0:
            raise ConfigError(f"CHAT_AGENT_LIMITS: {name} must be positive (leave it out for no limit), got {value}")
        values[name] = value
    return Limits(**values)


def _jwt_issuer(env: Mapping[str, str]) -> str | None:
    raw = env.get("CHAT_AGENT_JWT_ISSUER", "").strip()
    if not raw:
        return None
    match = re.fullmatch(r"(https?)://([^/:?#]+|\[[0-9a-fA-F:.]+\])(:\d+)?(/[^?#]*)?", raw)
    if match is None:
        raise ConfigError(f"CHAT_AGENT_JWT_ISSUER must be an issuer URL like https://login.example.com/realm, got {raw!r}")
    # Keys fetched over plain HTTP could be swapped by anyone on the way: only on this machine.
    if match.group(1) == "http" and match.group(2).strip("[]") not in {"localhost", "127.0.0.1", "::1"}:
        raise ConfigError("CHAT_AGENT_JWT_ISSUER must use https (plain http only for an issuer on loopback)")
    return raw


def _jwt_algorithms(env: Mapping[str, str]) -> tuple[str, ...]:
    chosen = _list(env, "CHAT_AGENT_JWT_ALGORITHMS") or JWT_ALGORITHMS
    wrong = [a for a in chosen if a not in JWT_ALGORITHMS]
    if wrong:  # never `none`, never a shared-secret HMAC: the keys come from the issuer's JWKS
        raise ConfigError(f"CHAT_AGENT_JWT_ALGORITHMS: {', '.join(wrong)} not allowed (choose from "
                          f"{', '.join(JWT_ALGORITHMS)})")
    return chosen


@dataclass(frozen=True, slots=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    data_dir: Path = Path("data")
    database_url: str | None = None
    anthropic_api_key: str | None = None
    anthropic_base_url: str | None = None
    # OpenAI-compatible providers (OpenAI, Ollama, vLLM, OpenRouter, LiteLLM): the SDK's own variables.
    openai_api_key: str | None = None
    openai_base_url: str | None = None
    model: str = DEFAULT_MODEL
    small_model: str = DEFAULT_SMALL_MODEL
    allowed_models: tuple[str, ...] = ()
    max_output_tokens: int = 8192
    thinking_budget: int = 4096
    max_context_tokens: int = 200_000
    summary_chars: int = 300_000
    max_steps: int = 12
    reflection_delay: float = 300.0
    llm_max_retries: int = 2
    llm_timeout: float = 600.0
    # A model call that sends nothing for this long (before its first piece or between two) is
    # given up; while it has sent nothing yet, clients get `status` every `status_interval` s.
    model_idle_timeout: float = 120.0
    status_interval: float = 5.0
    exa_api_key: str | None = None
    exa_base_url: str | None = None
    tool_timeout: float = 120.0
    tool_output_chars: int = 40_000
    # Tools beyond the built-in ones: `module:attribute` entries, and MCP servers' JSON file.
    tools: tuple[str, ...] = ()
    mcp_config: Path | None = None
    max_frame_bytes: int = 1 << 20
    ws_ping_interval: float = 20.0
    # Frames queued for clients that read slower than their conversation writes, in bytes.
    max_backlog_bytes: int = 512 << 20  # across all connections
    max_connection_backlog_bytes: int = 64 << 20
    api_keys: dict[str, str] = field(default_factory=dict)
    allow_no_auth: bool = False
    local_user: str = "local"
    # Browsers (web/origins.py): empty means the defaults of PROTOCOL.md for where we listen.
    allowed_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    # Files: uploads, attachments, generated images.
    upload_max_bytes: int = 20 * 1024 * 1024
    s3_bucket: str | None = None
    s3_endpoint_url: str | None = None
    s3_public_base_url: str | None = None
    image_fetch_max_bytes: int = 20 * 1024 * 1024
    image_fetch_timeout: float = 15.0
    document_inline_chars: int = 30_000
    # Image generation through an OpenAI-compatible images API.
    image_api_base_url: str | None = None
    image_api_key: str | None = None
    image_model: str = "gpt-image-1"
    # The code interpreter's sandbox.
    code_timeout: float = 30.0
    code_memory_mb: int = 512
    code_unsandboxed: bool = False
    # Deep research.
    research_max_searches: int = 8
    research_timeout: float = 240.0
    # Several instances (sessions/ownership.py): the bus, and how long an owner's lease lasts
    # without renewal (a dead instance's turns are closed within about 1.5 times that).
    redis_url: str | None = None
    instance_id: str = ""  # "" : a new one each start
    lease_seconds: float = 10.0
    # Tool approval: tools that wait for the user before they run ("*": all), and how long.
    require_approval: frozenset[str] = frozenset()
    approval_timeout: float = 600.0
    # The offline demo model (chat_agent/model/demo.py) instead of Anthropic's.
    demo: bool = False
    # ---- Security and fair use (docs/security.md) ----
    limits: Limits = field(default_factory=Limits)  # CHAT_AGENT_LIMITS
    # Sign-in with an identity provider: JWTs verified against the issuer's JWKS.
    jwt_issuer: str | None = None  # CHAT_AGENT_JWT_ISSUER
    jwt_audience: tuple[str, ...] = ()  # CHAT_AGENT_JWT_AUDIENCE (comma-separated; one must match)
    jwt_user_claim: str = "sub"  # CHAT_AGENT_JWT_USER_CLAIM
    jwt_algorithms: tuple[str, ...] = JWT_ALGORITHMS  # CHAT_AGENT_JWT_ALGORITHMS
    jwks_refresh: float = 30.0  # CHAT_AGENT_JWKS_REFRESH: least seconds between fetches for an unknown key
    # Slow clients: a request's head must arrive within header_timeout; its body within
    # body_timeout plus a second per body_min_rate bytes; a WebSocket must be accepted as fast.
    header_timeout: float = 10.0  # CHAT_AGENT_HEADER_TIMEOUT
    body_timeout: float = 20.0  # CHAT_AGENT_BODY_TIMEOUT
    body_min_rate: int = 4096  # CHAT_AGENT_BODY_MIN_RATE (bytes per second)
    code_disk_mb: int = 100  # CHAT_AGENT_CODE_DISK_MB: all the files one code_interpreter run may write

    @property
    def auth_enabled(self) -> bool:
        return bool(self.api_keys) or self.jwt_issuer is not None

    @property
    def models(self) -> tuple[str, ...]:
        """Models a client may pick with `settings.model`."""
        return self.allowed_models or (self.model, self.small_model)

    def allowed(self, model: str) -> str | None:
        """The allowed model a client's `settings.model` names (`anthropic:x` and `x` are one
        model), as the server spells it; None when it is not allowed."""
        try:
            wanted = split_model(model)
        except ValueError:
            return None
        return next((m for m in self.models if split_model(m) == wanted), None)

    def providers(self) -> dict[str, list[str]]:
        """Each provider the configured models use, with those models."""
        used: dict[str, list[str]] = {}
        for model in dict.fromkeys((self.model, self.small_model, *self.models)):
            used.setdefault(split_model(model)[0], []).append(model)
        return used

    def provider_key(self, provider: str) -> str | None:
        return {"anthropic": self.anthropic_api_key, "openai": self.openai_api_key}.get(provider)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        env = os.environ if env is None else env
        model = _model(env, "CHAT_AGENT_MODEL", DEFAULT_MODEL)
        small_model = _model(env, "CHAT_AGENT_SMALL_MODEL", DEFAULT_SMALL_MODEL)
        allowed = tuple(_checked_model("CHAT_AGENT_ALLOWED_MODELS", m) for m in _list(env, "CHAT_AGENT_ALLOWED_MODELS"))
        if _jwt_issuer(env) and not _list(env, "CHAT_AGENT_JWT_AUDIENCE"):
            # An issuer such as Google's signs tokens for every app it serves: without the
            # audience, any of them would sign in here.
            raise ConfigError("CHAT_AGENT_JWT_ISSUER needs CHAT_AGENT_JWT_AUDIENCE (the client id or API "
                              "identifier the issuer puts in `aud` for this server)")
        return cls(
            host=env.get("CHAT_AGENT_HOST") or "127.0.0.1",
            port=_int(env, "CHAT_AGENT_PORT", 8000),
            data_dir=Path(env.get("CHAT_AGENT_DATA_DIR") or "data"),
            database_url=env.get("CHAT_AGENT_DATABASE_URL") or None,
            anthropic_api_key=env.get("ANTHROPIC_API_KEY") or None,
            anthropic_base_url=env.get("ANTHROPIC_BASE_URL") or None,
            openai_api_key=env.get("OPENAI_API_KEY") or None,
            openai_base_url=env.get("OPENAI_BASE_URL") or None,
            model=model,
            small_model=small_model,
            allowed_models=allowed,
            max_output_tokens=_int(env, "CHAT_AGENT_MAX_OUTPUT_TOKENS", 8192),
            thinking_budget=_int(env, "CHAT_AGENT_THINKING_BUDGET", 4096),
            max_context_tokens=_int(env, "CHAT_AGENT_MAX_CONTEXT_TOKENS", 200_000),
            summary_chars=_int(env, "CHAT_AGENT_SUMMARY_CHARS", 300_000),
            max_steps=_int(env, "CHAT_AGENT_MAX_STEPS", 12),
            reflection_delay=_float(env, "CHAT_AGENT_REFLECTION_DELAY", 300.0),
            llm_max_retries=_int(env, "CHAT_AGENT_LLM_MAX_RETRIES", 2),
            llm_timeout=_float(env, "CHAT_AGENT_LLM_TIMEOUT", 600.0),
            model_idle_timeout=_seconds(env, "CHAT_AGENT_MODEL_IDLE_TIMEOUT", 120.0),
            exa_api_key=env.get("EXA_API_KEY") or None,
            exa_base_url=env.get("EXA_BASE_URL") or None,
            tool_timeout=_float(env, "CHAT_AGENT_TOOL_TIMEOUT", 120.0),
            tool_output_chars=_int(env, "CHAT_AGENT_TOOL_OUTPUT_CHARS", 40_000),
            tools=_list(env, "CHAT_AGENT_TOOLS"),
            mcp_config=Path(env["CHAT_AGENT_MCP_CONFIG"]) if env.get("CHAT_AGENT_MCP_CONFIG", "").strip() else None,
            max_frame_bytes=_int(env, "CHAT_AGENT_MAX_FRAME_BYTES", 1 << 20),
            ws_ping_interval=_float(env, "CHAT_AGENT_WS_PING_INTERVAL", 20.0),
            max_backlog_bytes=_positive(env, "CHAT_AGENT_MAX_BACKLOG_BYTES", 512 << 20),
            max_connection_backlog_bytes=_positive(env, "CHAT_AGENT_MAX_CONNECTION_BACKLOG_BYTES", 64 << 20),
            api_keys=_api_keys(env.get("CHAT_AGENT_API_KEYS", "")),
            allow_no_auth=_flag(env, "CHAT_AGENT_ALLOW_NO_AUTH"),
            allowed_origins=_origins(env),
            allowed_hosts=_hosts(env),
            upload_max_bytes=_int(env, "CHAT_AGENT_UPLOAD_MAX_BYTES", 20 * 1024 * 1024),
            s3_bucket=env.get("CHAT_AGENT_S3_BUCKET") or None,
            s3_endpoint_url=env.get("CHAT_AGENT_S3_ENDPOINT_URL") or None,
            s3_public_base_url=env.get("CHAT_AGENT_S3_PUBLIC_BASE_URL") or None,
            image_fetch_max_bytes=_int(env, "CHAT_AGENT_IMAGE_FETCH_MAX_BYTES", 20 * 1024 * 1024),
            image_fetch_timeout=_float(env, "CHAT_AGENT_IMAGE_FETCH_TIMEOUT", 15.0),
            document_inline_chars=_int(env, "CHAT_AGENT_DOCUMENT_INLINE_CHARS", 30_000),
            image_api_base_url=env.get("CHAT_AGENT_IMAGE_API_BASE_URL") or None,
            image_api_key=env.get("CHAT_AGENT_IMAGE_API_KEY") or None,
            image_model=env.get("CHAT_AGENT_IMAGE_MODEL") or "gpt-image-1",
            code_timeout=_float(env, "CHAT_AGENT_CODE_TIMEOUT", 30.0),
            code_memory_mb=_int(env, "CHAT_AGENT_CODE_MEMORY_MB", 512),
            code_unsandboxed=_flag(env, "CHAT_AGENT_CODE_UNSANDBOXED"),
            research_max_searches=_int(env, "CHAT_AGENT_RESEARCH_MAX_SEARCHES", 8),
            redis_url=env.get("CHAT_AGENT_REDIS_URL") or None,
            instance_id=_instance_id(env),
            lease_seconds=_lease_seconds(env),
            research_timeout=_float(env, "CHAT_AGENT_RESEARCH_TIMEOUT", 240.0),
            require_approval=frozenset(_list(env, "CHAT_AGENT_REQUIRE_APPROVAL")),
            approval_timeout=_approval_timeout(env),
            # The variable never hides a real key's model: only `--demo` does that (server.py).
            demo=_flag(env, "CHAT_AGENT_DEMO") and not env.get("ANTHROPIC_API_KEY"),
            # ---- Security and fair use ----
            limits=_limits(env),
            jwt_issuer=_jwt_issuer(env),
            jwt_audience=_list(env, "CHAT_AGENT_JWT_AUDIENCE"),
            jwt_user_claim=env.get("CHAT_AGENT_JWT_USER_CLAIM", "").strip() or "sub",
            jwt_algorithms=_jwt_algorithms(env),
            jwks_refresh=_seconds(env, "CHAT_AGENT_JWKS_REFRESH", 30.0),
            header_timeout=_seconds(env, "CHAT_AGENT_HEADER_TIMEOUT", 10.0),
            body_timeout=_seconds(env, "CHAT_AGENT_BODY_TIMEOUT", 20.0),
            body_min_rate=_positive(env, "CHAT_AGENT_BODY_MIN_RATE", 4096),
            code_disk_mb=_positive(env, "CHAT_AGENT_CODE_DISK_MB", 100),
        )
