"""Settings: one typed object, read from the environment once at start-up (`Settings.from_env`)
and passed down explicitly. `server.py` first loads a `.env` file into the environment.

Every field declared with `setting(...)` is a variable: `CHAT_AGENT_` and its name in
capitals, unless `env=` names another (the SDKs' own `ANTHROPIC_API_KEY`...). Its text is
the documentation: docs/configuration.md and .env.example are generated from this class
(`python docs/generate.py`), and a test fails when they differ. Adding a setting is one
field here. Fields declared without `setting` are not variables (tests and the demo set them).

`Settings(...)` never reads the environment: what a test or a benchmark builds is what it says.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping

from pydantic import AfterValidator, BeforeValidator, Field, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic.fields import FieldInfo

DEFAULT_MODEL = "claude-sonnet-4-6"
DEFAULT_SMALL_MODEL = "claude-haiku-4-5"
# Model providers by the prefix a model name may carry (`openai:gpt-4.1`), each with the
# variable that holds its key. A bare name is Anthropic's.
PROVIDERS: dict[str, str] = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
DEFAULT_PROVIDER = "anthropic"
PREFIX = "CHAT_AGENT_"


class ConfigError(ValueError):
    """A setting has a value the server cannot run with."""


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


# ---- value types: how a variable's text becomes a value, and what is refused ----

def _comma_list(value: Any) -> Any:
    return tuple(item.strip() for item in value.split(",") if item.strip()) if isinstance(value, str) else value


def _flag(value: Any) -> Any:
    # Anything but a yes is a no, as it always was: a typo never stops the start.
    return value.strip().lower() in {"1", "true", "yes", "on"} if isinstance(value, str) else value


def _checked_model(model: str) -> str:
    split_model(model)  # its ValueError is the explanation
    return model


def _api_keys(value: Any) -> Any:
    """`user:token,user2:token2` → {token: user}; tokens are what clients present."""
    if not isinstance(value, str):
        return value
    keys: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in value.split(","))):
        user, sep, token = pair.partition(":")
        if not sep or not user.strip() or not token.strip():
            raise ValueError("must look like 'user:token,user2:token2'")
        keys[token.strip()] = user.strip()
    return keys


# An origin is what a browser sends: scheme://host[:port], here also with `:*` for any port.
_ORIGIN = re.compile(r"https?://([^\s/:\[\]*]+|\[[0-9a-f:.]+\])(:(\d+|\*))?", re.IGNORECASE)
# A host without a port, as Starlette's TrustedHostMiddleware matches it: `*`, `*.example.com`, `[::1]`.
_HOST = re.compile(r"\*|(\*\.)?[^\s/:\[\]*]+|\[[0-9a-f:.]+\]", re.IGNORECASE)


def _origins(origins: tuple[str, ...]) -> tuple[str, ...]:
    for origin in origins:
        if origin not in ("*", "null") and not _ORIGIN.fullmatch(origin):
            raise ValueError(f"{origin!r} is not an origin like https://app.example.com or http://localhost:* "
                             "(no path, no trailing slash)")
    return origins


def _hosts(hosts: tuple[str, ...]) -> tuple[str, ...]:
    hosts = tuple(h.lower() for h in hosts)
    for host in hosts:
        if not _HOST.fullmatch(host):
            raise ValueError(f"{host!r} is not a host name like chat.example.com, *.example.com, [::1] or * "
                             "(no scheme, no port)")
    return hosts


def _instance_id(value: str) -> str:
    if value and not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", value):
        raise ValueError("must be 1 to 32 letters, digits, '-' or '_'")
    return value


def _log_level(value: str) -> str:
    if value.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise ValueError(f"{value!r} is not one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
    return value.upper()


# ---- Security and fair use (docs/security.md) ----

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


def _limits(value: Any) -> Any:
    """`turns_per_minute=20,sockets=10` → Limits."""
    if not isinstance(value, str):
        return value
    values: dict[str, int] = {}
    for pair in filter(None, (p.strip() for p in value.split(","))):
        name, sep, raw = (part.strip() for part in pair.partition("="))
        if not sep or name not in LIMIT_NAMES:
            raise ValueError(f"{pair!r} is not name=value with a name among {', '.join(LIMIT_NAMES)}")
        try:
            number = int(raw.replace("_", ""))
        except ValueError:
            raise ValueError(f"{name} must be a whole number, got {raw!r}") from None
        if number <= 0:
            raise ValueError(f"{name} must be positive (leave it out for no limit), got {number}")
        values[name] = number
    return Limits(**values)


def _jwt_issuer(value: str | None) -> str | None:
    if not value:
        return None
    match = re.fullmatch(r"(https?)://([^/:?#]+|\[[0-9a-fA-F:.]+\])(:\d+)?(/[^?#]*)?", value)
    if match is None:
        raise ValueError(f"must be an issuer URL like https://login.example.com/realm, got {value!r}")
    # Keys fetched over plain HTTP could be swapped by anyone on the way: only on this machine.
    if match.group(1) == "http" and match.group(2).strip("[]") not in {"localhost", "127.0.0.1", "::1"}:
        raise ValueError("must use https (plain http only for an issuer on loopback)")
    return value


def _jwt_algorithms(chosen: tuple[str, ...]) -> tuple[str, ...]:
    wrong = [a for a in chosen if a not in JWT_ALGORITHMS]
    if wrong:  # never `none`, never a shared-secret HMAC: the keys come from the issuer's JWKS
        raise ValueError(f"{', '.join(wrong)} not allowed (choose from {', '.join(JWT_ALGORITHMS)})")
    return chosen or JWT_ALGORITHMS


def _review_mode(value: Any) -> Any:
    """`CHAT_AGENT_REVIEW`: a flag's words turn it on (`auto`) or off as well."""
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on"):
        return "auto"
    if isinstance(value, str) and value.strip().lower() in ("", "0", "false", "no"):
        return "off"
    return value.strip().lower() if isinstance(value, str) else value


Flag = Annotated[bool, BeforeValidator(_flag)]
Names = Annotated[tuple[str, ...], BeforeValidator(_comma_list)]
Model = Annotated[str, AfterValidator(_checked_model)]
Models = Annotated[tuple[Model, ...], BeforeValidator(_comma_list)]
Positive = Annotated[int, Field(gt=0)]
Seconds = Annotated[float, Field(gt=0)]


def setting(default: Any, doc: str, *, env: str | None = None, shown: str | None = None,
            section: str | None = None) -> Any:
    """A field that is a variable. `doc` says what it does (Markdown, for the docs), `env`
    names a variable outside our prefix, `shown` says the default in words where its value
    would not, and `section` starts a group of the docs' table at this field."""
    extra = {"env": env, "shown": shown, "section": section}
    if isinstance(default, (dict, list, set, frozenset)):
        return Field(default_factory=lambda: type(default)(default), description=doc, json_schema_extra=extra)
    return Field(default, description=doc, json_schema_extra=extra)


def variable(name: str, field: FieldInfo) -> str | None:
    """The environment variable of a field, or None for a field that is not one."""
    extra = field.json_schema_extra
    if not isinstance(extra, dict) or "env" not in extra:
        return None
    return str(extra["env"] or PREFIX + name.upper())


class Settings(BaseSettings):
    model_config = SettingsConfigDict(frozen=True, extra="forbid", case_sensitive=True)

    host: str = setting("127.0.0.1", "the address the server listens on (`0.0.0.0`: every interface; then "
                        "auth is required, see `CHAT_AGENT_API_KEYS`)", section="Server")
    port: int = setting(8000, "the port it listens on")
    data_dir: Path = setting(Path("data"), "the SQLite file (`chat-agent.db`), local files, sandbox scratch dirs",
                             shown="`./data`")
    database_url: str | None = setting(
        None, "`sqlite:///path/to/file.db`, or PostgreSQL: `postgresql://user:password@host:5432/dbname` (libpq's "
        "URL; `postgres://` too; `?options=-csearch_path%3Dname` keeps the tables in schema `name`). The schema is "
        "created or migrated at start-up, once however many instances start together", shown="SQLite in the data dir")
    database_pool_size: Annotated[int, Field(ge=2)] = setting(
        10, "PostgreSQL: the most connections the store's pool opens (one of them the writer's); the job queue's, "
        "the knowledge bases' and the quotas' pools open at most 4 each, or this many if fewer, and the job queue and the "
        "bus 4 more in all. PostgreSQL refuses connections past its `max_connections` (100 by default): keep "
        "instances × (this + 16) under it", shown="10")
    log_level: Annotated[str, AfterValidator(_log_level)] = setting("INFO", "`DEBUG`, `INFO`, `WARNING`…")
    demo: Flag = setting(False, "`1`: the offline demo model (as `server.py --demo`), only while no "
                         "`ANTHROPIC_API_KEY` is set: with a key, only `--demo` switches to it", shown="off")

    anthropic_api_key: str | None = setting(None, "the Anthropic SDK's own variable", env="ANTHROPIC_API_KEY",
                                            section="Models")
    anthropic_base_url: str | None = setting(None, "the Anthropic SDK's own variable (a proxy works)",
                                             env="ANTHROPIC_BASE_URL", shown="the SDK's")
    # OpenAI-compatible providers (OpenAI, Ollama, vLLM, OpenRouter, LiteLLM): the SDK's own variables.
    openai_api_key: str | None = setting(None, "the openai SDK's own variable, for `openai:` models",
                                         env="OPENAI_API_KEY")
    openai_base_url: str | None = setting(
        None, "the openai SDK's own variable: OpenAI, or any OpenAI-compatible server (Ollama, vLLM, OpenRouter, "
        "a LiteLLM proxy; see [Other model providers](models.md))", env="OPENAI_BASE_URL", shown="OpenAI's")
    model: Model = setting(DEFAULT_MODEL, "the main model. A name may carry its provider: `openai:gpt-4.1`, "
                           "`anthropic:claude-sonnet-4-6`; a bare name is Anthropic's. An unknown prefix stops the start")
    small_model: Model = setting(DEFAULT_SMALL_MODEL, "the model for summaries, titles, reflection (named as above)")
    allowed_models: Models = setting((), "comma-separated models a client may pick with `settings.model` (named as "
                                     "above; each message goes to its model's provider)", shown="the two above")
    max_output_tokens: int = setting(8192, "output budget of one model call")
    thinking_budget: int = setting(4096, "thinking budget when a message asks for `thinking`")
    max_context_tokens: int = setting(200_000, "the context window shown as `maxTokens`")
    summary_chars: int = setting(300_000, "summarize the model-facing history past this many characters")
    max_steps: int = setting(12, "model calls per turn before it stops with `max_steps`")
    reflection_delay: float = setting(300.0, "seconds of quiet after an artifact change before the background "
                                      "reflection")
    llm_max_retries: int = setting(2, "retries of a model call that failed before any of it was shown: a "
                                   "408/409/429/5xx/529 answer, a connection refused or timed out, an error inside "
                                   "the stream (each told to clients as `status` `retrying`)")
    llm_timeout: float = setting(600.0, "seconds for one model call")
    # A model call that sends nothing for this long (before its first piece or between two) is
    # given up; while it has sent nothing yet, clients get `status` every `status_interval` s.
    model_idle_timeout: Seconds = setting(120.0, "seconds a model call may send nothing (before its first piece or "
                                          "between two) before it is given up with `llm_error`; raise it for a slow "
                                          "local model that reads a long prompt before it answers")
    status_interval: float = 5.0

    exa_api_key: str | None = setting(None, "web search (`web_search` is offered only with a key; the demo searches "
                                      "canned pages without one)", env="EXA_API_KEY", section="Tools")
    exa_base_url: str | None = setting(None, "Exa's API", env="EXA_BASE_URL", shown="Exa's")
    tool_timeout: float = setting(120.0, "seconds a tool may run")
    tool_output_chars: int = setting(40_000, "a tool result is cut to this many characters")
    # Tools beyond the built-in ones: `module:attribute` entries, and MCP servers' JSON file.
    tools: Names = setting((), "comma-separated `package.module:attribute`, each a LangChain tool, a list of them, "
                           "or a factory taking the settings (see [Tools and MCP](tools.md))", shown="none")
    mcp_config: Path | None = setting(None, "a JSON file of MCP servers, `{\"mcpServers\": {...}}` as other clients "
                                      "write it (see [Tools and MCP](tools.md))")
    require_approval: Annotated[frozenset[str], BeforeValidator(_comma_list)] = setting(
        frozenset(), "comma-separated tool names (`*`: all) that wait for the user's `approve` before they run",
        shown="none")
    approval_timeout: Seconds = setting(600.0, "seconds an approval request waits before it is declined as timed out "
                                              "(a review decision before it is accepted, a call to a client's own "
                                              "tool before the model is told no result came)")
    review: Annotated[Literal["off", "auto", "ask"], BeforeValidator(_review_mode)] = setting(
        "off", "`auto` or `ask`: after a turn that changed the artifact or made an image, a reviewer model judges "
        "the result and a failed review is revised (`auto`) or the user is asked (`ask`); a message's "
        "`settings.review` overrides it. Each review is one more model call, counted in `done.usage`", shown="off")
    review_max_revisions: Annotated[int, Field(ge=0, le=3)] = setting(
        1, "revisions after failed reviews in one turn, by default (a message's `settings.review.maxRevisions`: 0-3)")
    review_model: Model | None = setting(None, "the reviewer's model (named as above)", shown="the small model")
    repeatable_tools: Annotated[frozenset[str], BeforeValidator(_comma_list)] = setting(
        frozenset(), "comma-separated tool names (MCP or your own) safe to run again when a turn continues after a "
        "failure, beside those that declare it themselves (see [Tools and MCP](tools.md))", shown="none")
    continue_turns: Flag = setting(True, "`0`: a turn cut by a failure (its instance died or stopped) is closed as "
                                   "`interrupted` instead of continuing on the next owner", shown="on")
    image_api_base_url: str | None = setting(None, "an OpenAI-compatible images API for `generate_image` / "
                                             "`edit_image` (offered only when set)")
    image_api_key: str | None = setting(None, "its key")
    image_model: str = setting("gpt-image-1", "its model")
    code_timeout: float = setting(30.0, "`code_interpreter`'s wall-clock limit, in seconds")
    code_memory_mb: int = setting(512, "`code_interpreter`'s memory limit, in MB")
    code_unsandboxed: Flag = setting(False, "`1` runs model-written code WITHOUT a sandbox where bubblewrap cannot "
                                     "run (dangerous; logged loudly)", shown="off")
    research_max_searches: int = setting(8, "searches of one `deep_research` call")
    research_timeout: float = setting(240.0, "seconds of one `deep_research` call")

    # Knowledge bases (chat_agent/knowledge): full text always; vectors with an embeddings model.
    embeddings_model: str | None = setting(
        None, "knowledge bases: an OpenAI-compatible `/v1/embeddings` model (OpenAI, Ollama, vLLM, a LiteLLM proxy) "
        "whose vectors are searched beside the full text; without one, full text alone",
        shown="none (full text only)", section="Knowledge bases")
    embeddings_base_url: str | None = setting(None, "the embeddings endpoint's base URL (…/v1)",
                                              shown="`OPENAI_BASE_URL`, else OpenAI's")
    embeddings_api_key: str | None = setting(None, "its key", shown="`OPENAI_API_KEY`")

    max_frame_bytes: int = setting(1 << 20, "client frames above this get `too_large` (the socket stays)",
                                   section="Connections and limits")
    ws_ping_interval: float = setting(20.0, "seconds between WebSocket pings")
    # Frames queued for clients that read slower than their conversation writes, in bytes.
    max_backlog_bytes: Positive = setting(512 << 20, "memory all sockets together may hold in frames their clients "
                                          "have not read yet; past it the client furthest behind is closed with "
                                          "`1013`", shown="`536870912` (512 MB)")
    max_connection_backlog_bytes: Positive = setting(64 << 20, "the same for one socket", shown="`67108864` (64 MB)")
    upload_max_bytes: int = setting(20 * 1024 * 1024, "largest upload (and inline `data` image); above it: 413 / "
                                    "`too_large`", shown="`20971520` (20 MB)")
    image_fetch_max_bytes: int = setting(20 * 1024 * 1024, "largest image attached by `url` (public addresses only)",
                                         shown="`20971520` (20 MB)")
    image_fetch_timeout: float = setting(15.0, "seconds to fetch an image attached by `url`")
    document_inline_chars: int = setting(30_000, "documents up to this size go into the message whole; longer ones "
                                         "are read with `analyze_document`")

    api_keys: Annotated[dict[str, str], BeforeValidator(_api_keys)] = setting(
        {}, "`user:token,user2:token2` turns auth on", shown="off", section="Auth and browsers")
    allow_no_auth: Flag = setting(False, "`1` allows a non-loopback host without auth", shown="off")
    local_user: str = "local"
    # Browsers (web/origins.py): empty means the defaults of the protocol for where we listen.
    allowed_origins: Annotated[Names, AfterValidator(_origins)] = setting(
        (), "comma-separated origins whose pages may use the server (`https://app.example.com`, `http://localhost:*` "
        "for any port, `*` for all); others get 403 `forbidden_origin`",
        shown="on loopback: `http://localhost:*`, `http://127.0.0.1:*`, `http://[::1]:*`; always the server's own "
        "origin")
    allowed_hosts: Annotated[Names, AfterValidator(_hosts)] = setting(
        (), "comma-separated `Host` names the server answers (`chat.example.com`, `*.example.com`, `*`); others get "
        "400", shown="the listening host, `localhost`, `127.0.0.1`, `[::1]`")

    # Security and fair use (docs/security.md): quotas, sign-in with an identity provider, slow clients.
    limits: Annotated[Limits, BeforeValidator(_limits)] = setting(
        Limits(), "per-user quotas, `name=value,…` with `turns_per_minute`, `tokens_per_day`, `sockets`, "
        "`uploads_per_minute`, `upload_bytes_per_day`, `concurrent_turns` (see [Security](security.md))",
        shown="unlimited", section="Security and fair use")
    jwt_issuer: Annotated[str | None, AfterValidator(_jwt_issuer)] = setting(
        None, "sign-in with an identity provider's JWTs: its issuer URL (https, or http on loopback); needs "
        "`CHAT_AGENT_JWT_AUDIENCE`", shown="off")
    jwt_audience: Names = setting((), "the audience(s) this server accepts, comma-separated (one must match)",
                                  shown="none")
    jwt_user_claim: str = setting("sub", "the claim that is the user id")
    jwt_algorithms: Annotated[Names, AfterValidator(_jwt_algorithms)] = setting(
        JWT_ALGORITHMS, "the signing algorithms accepted (asymmetric only)", shown="RS, PS, ES and EdDSA")
    jwks_refresh: Seconds = setting(30.0, "least seconds between fetches of the issuer's keys for an unknown `kid`")
    header_timeout: Seconds = setting(10.0, "slow clients: seconds for a request's head (408 past it)")
    body_timeout: Seconds = setting(20.0, "seconds for a request's body, plus one per `CHAT_AGENT_BODY_MIN_RATE` "
                                    "bytes received (408 past it)")
    body_min_rate: Positive = setting(4096, "bytes per second a slow body is allowed, on top of the body timeout")
    code_disk_mb: Positive = setting(100, "`code_interpreter`'s disk quota: all the files one run writes, in MB")

    s3_bucket: str | None = setting(None, "store files in this S3 or Cloudflare R2 bucket (credentials the boto3 "
                                    "way: `AWS_ACCESS_KEY_ID`…) instead of the data dir", shown="local files",
                                    section="Storage and several instances")
    s3_endpoint_url: str | None = setting(None, "the S3 API's URL, for R2, MinIO and other S3-compatible stores",
                                          shown="AWS")
    s3_public_base_url: str | None = setting(None, "a public bucket's base URL (R2): file URLs point there instead "
                                             "of `/api/uploads/{id}`")
    # Several instances (sessions/ownership.py): the bus, and how long an owner's lease lasts
    # without renewal (a dead instance's turns are closed within about 1.5 times that).
    redis_url: str | None = setting(None, "with several instances: carry frames and commands between them over Redis "
                                    "pub/sub instead of PostgreSQL's LISTEN/NOTIFY",
                                    shown="PostgreSQL's, when the database is")
    instance_id: Annotated[str, AfterValidator(_instance_id)] = setting(
        "", "this instance's name in leases and logs (1 to 32 letters, digits, `-`, `_`)",
        shown="a new random one each start")
    lease_seconds: Annotated[float, Field(ge=1.0, le=300.0)] = setting(
        10.0, "how long an instance owns a conversation without renewing (1 to 300); a dead instance's turns are "
        "closed by another within about 1.2 times that")

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   **_: PydanticBaseSettingsSource) -> tuple[PydanticBaseSettingsSource, ...]:
        # Only what the caller passes: reading the environment is `from_env`'s job alone.
        return (init_settings,)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        """The settings the environment (`os.environ`, or `env`) describes; ConfigError names
        the variable of the first value the server cannot run with."""
        env = os.environ if env is None else env
        try:
            settings = cls(**Environment(cls, env)())
        except ValidationError as exc:
            raise ConfigError(_explain(cls, exc)) from None
        if settings.jwt_issuer and not settings.jwt_audience:
            # An issuer such as Google's signs tokens for every app it serves: without the
            # audience, any of them would sign in here.
            raise ConfigError("CHAT_AGENT_JWT_ISSUER needs CHAT_AGENT_JWT_AUDIENCE (the client id or API "
                              "identifier the issuer puts in `aud` for this server)")
        if settings.demo and settings.anthropic_api_key:
            # The variable never hides a real key's model: only `--demo` does that (server.py).
            settings = settings.model_copy(update={"demo": False})
        return settings

    @classmethod
    def variables(cls) -> dict[str, str]:
        """{variable: field name} of every field that is a variable, in declaration order."""
        return {env: name for name, field in cls.model_fields.items() if (env := variable(name, field))}

    @property
    def auth_enabled(self) -> bool:
        return bool(self.api_keys) or self.jwt_issuer is not None

    @property
    def models(self) -> tuple[str, ...]:
        """Models a client may pick with `settings.model`."""
        return self.allowed_models or (self.model, self.small_model)

    @property
    def offered_models(self) -> list[str]:
        """The allowed models as `session.models` lists them: the one a message gets without
        `settings.model` first (when it is allowed)."""
        default = self.allowed(self.model)
        return [*([default] if default else []), *(m for m in self.models if m != default)]

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


class Environment(PydanticBaseSettingsSource):
    """The values of a mapping of variables, by field name. A variable that is empty (or only
    blanks) counts as unset; values lose surrounding blanks (a pasted key's newline, say)."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]):
        super().__init__(settings_cls)
        self.env = env

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        name = variable(field_name, field)
        value = self.env.get(name, "").strip() if name else ""
        return (value or None), field_name, False

    def __call__(self) -> dict[str, Any]:
        values = {}
        for name, field in self.settings_cls.model_fields.items():
            value, key, _ = self.get_field_value(field, name)
            if value is not None:
                values[key] = value
        return values


_REASONS = {"int_parsing": "must be an integer", "float_parsing": "must be a number",
            "greater_than": "must be greater than {gt}", "greater_than_equal": "must be at least {ge}",
            "less_than_equal": "must be at most {le}", "finite_number": "must be a finite number"}


def _explain(settings_cls: type[Settings], exc: ValidationError) -> str:
    """`CHAT_AGENT_PORT: must be an integer, got 'abc'`: the first error, by its variable."""
    error = exc.errors(include_url=False)[0]
    name = str(error["loc"][0]) if error["loc"] else ""
    field = settings_cls.model_fields.get(name)
    where = (variable(name, field) if field else None) or name
    if error["type"] == "value_error":
        return f"{where}: {str(error['ctx']['error'])}"
    reason = _REASONS.get(error["type"], error["msg"][:1].lower() + error["msg"][1:]).format(**error.get("ctx", {}))
    return f"{where}: {reason}, got {error['input']!r}"
