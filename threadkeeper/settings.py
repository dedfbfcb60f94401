"""Settings from the environment (and an optional ``.env``). Invalid values fail at start-up naming the variable."""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from threadkeeper.bot.manifest import BOT_SCOPES
from threadkeeper.persistence import ThreadkeeperError
from threadkeeper.persistence.errors import without_password


class SettingsError(ThreadkeeperError):
    """A setting has an invalid value."""


class Settings(BaseSettings):
    """Every variable Threadkeeper reads. Field ``x_y`` is the variable ``X_Y``."""

    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore",
                                      case_sensitive=False)

    redis_url: str | None = None
    """Unset: the embedded Redis, started on a unix socket under ``threadkeeper_data_dir``."""
    redis_cluster: bool = False
    """``REDIS_URL`` names one node of a Redis Cluster: use redis-py's cluster client (it finds the others)."""
    threadkeeper_data_dir: str = Field(default=".threadkeeper", min_length=1)
    """Where the embedded Redis (used when ``REDIS_URL`` is unset) keeps its append-only file and socket."""
    threadkeeper_key_prefix: str = Field(default="tk", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    threadkeeper_retention_days: float = Field(default=30.0, gt=0, le=3650)
    threadkeeper_lease_seconds: float = Field(default=120.0, ge=5, le=3600)
    threadkeeper_prepare_compaction: bool = True
    """Plan the next compaction in the background once a thread nears the trigger (off: the turn that reaches the
    trigger compacts while the person waits, as before)."""
    threadkeeper_redis_max_connections: int = Field(default=128, ge=2, le=10_000)
    threadkeeper_redis_timeout_seconds: float = Field(default=5.0, ge=0, le=600)
    """How long one Redis command may take before it fails (and is retried on a new connection); 0 waits forever."""
    threadkeeper_ack_seconds: float = Field(default=2.0, gt=0, le=2.9)
    """How long the events endpoint waits for Redis before it answers 503 (Slack retries; it gives up on an
    acknowledgement after 3 s)."""
    threadkeeper_cache_mb: int = Field(default=128, ge=0, le=1_000_000)
    threadkeeper_sweep_seconds: float = Field(default=30.0, ge=1, le=3600)
    threadkeeper_shutdown_seconds: float = Field(default=20.0, ge=0, le=600)
    """On SIGTERM, how long running turns get to finish before they are set aside for another worker."""
    threadkeeper_log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    threadkeeper_log_format: Literal["text", "json"] = "text"
    """``text``: one ``key=value`` line per record; ``json``: one JSON object per line."""

    threadkeeper_memory_workspaces: str = ""
    """Workspaces (team ids, comma-separated; ``*``: all) where memory across conversations is on; empty: off."""
    threadkeeper_memory_channels: str = ""
    """Channels (ids, comma-separated; ``*``: all) of those workspaces where memory is on; empty: none."""
    threadkeeper_memory_idle_minutes: float = Field(default=30.0, ge=0, le=10_080)
    """A conversation's memory is extracted once it has been idle this long."""
    threadkeeper_memory_ttl_days: float = Field(default=90.0, gt=0, le=3650)
    threadkeeper_memory_max_unused_days: float = Field(default=60.0, gt=0, le=3650)
    threadkeeper_memory_model_calls_per_day: int = Field(default=200, ge=0, le=1_000_000)
    """The most extraction model calls per conversation per day (there is at most one per extraction)."""

    ai_model: str = Field(default="offline", min_length=1)
    ai_fast_model: str | None = None
    ai_model_context_window_tokens: int | None = Field(default=None, ge=1024, le=100_000_000)
    ai_fast_model_context_window_tokens: int | None = Field(default=None, ge=1024, le=100_000_000)
    ai_max_output_tokens: int | None = Field(default=None, ge=64, le=1_000_000)
    ai_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    ai_turn_seconds: float = Field(default=300.0, gt=0, le=7200)
    """The most model time one turn may spend over all its calls and retries."""
    ai_retry_attempts: int = Field(default=3, ge=1, le=10)
    ai_embedding_model: str | None = None
    """Any litellm embedding model (``openai/text-embedding-3-small``, ``ollama/nomic-embed-text``, …): recall then
    fuses BM25 with the question's nearest messages by meaning. Unset (the default): recall by words alone."""

    slack_bot_token: str | None = None
    slack_app_token: str | None = None
    slack_signing_secret: str | None = None
    slack_api_base_url: str | None = None
    slack_client_id: str | None = None
    """With ``SLACK_CLIENT_SECRET``: any number of workspaces install the app (OAuth at ``/slack/install``)."""
    slack_client_secret: str | None = None
    slack_redirect_uri: str | None = None
    threadkeeper_encryption_key: str | None = None
    """Fernet key(s) the OAuth installations (bot tokens) are stored encrypted with: needed with
    ``SLACK_CLIENT_ID``; several, separated by commas, to rotate (the first encrypts, all decrypt)."""
    slack_scopes: str = ",".join(BOT_SCOPES)
    threadkeeper_slack_surface: Literal["agent", "assistant"] = "agent"
    """How people talk to the bot in Slack: the agent messaging experience (``agent_view``, what new apps get), or
    the assistant experience (``assistant_view``) an app created before it was made with."""
    threadkeeper_slack_history: Literal["auto", "limited", "exempt"] = "auto"
    """How fast a thread's earlier messages may be read (``conversations.replies``): ``limited`` to Slack's pace
    for commercially distributed apps not on the Marketplace (one request a minute, 15 messages), ``exempt``
    (internal and Marketplace apps), or ``auto``: limited when installed through OAuth, exempt with one bot
    token. ``Retry-After`` is respected either way."""
    threadkeeper_slack_history_interval_seconds: float = Field(default=60.0, gt=0, le=3600)
    """Seconds between two reads of a workspace's threads when limited (Slack's posted limit: 60)."""

    @field_validator("redis_url", "ai_fast_model", "ai_embedding_model", "slack_bot_token", "slack_app_token", "slack_signing_secret",
                     "slack_api_base_url", "slack_client_id", "slack_client_secret", "slack_redirect_uri",
                     "threadkeeper_encryption_key", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("threadkeeper_log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: str | None) -> str | None:
        if value and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        if value:
            _check_redis_url(value)
        return value

    @model_validator(mode="after")
    def _cluster_needs_a_url(self) -> Settings:
        if self.redis_cluster and (not self.redis_url or self.redis_url.startswith("unix://")):
            raise ValueError("REDIS_CLUSTER=true needs REDIS_URL to name a node of the cluster (redis://host:port)")
        return self

    @model_validator(mode="after")
    def _one_slack_mode(self) -> Settings:
        if bool(self.slack_client_id) != bool(self.slack_client_secret):
            raise ValueError("SLACK_CLIENT_ID and SLACK_CLIENT_SECRET go together (installs through OAuth)")
        if self.slack_client_id and self.slack_bot_token:
            raise ValueError("set either SLACK_BOT_TOKEN (one workspace) or SLACK_CLIENT_ID and SLACK_CLIENT_SECRET "
                             "(any workspace that installs the app), not both")
        if self.slack_client_id and not self.slack_signing_secret:
            raise ValueError("installs through OAuth need SLACK_SIGNING_SECRET (the app is served over HTTP)")
        if self.slack_client_id and not self.threadkeeper_encryption_key:
            raise ValueError("installs through OAuth need THREADKEEPER_ENCRYPTION_KEY: each workspace's bot token "
                             "is stored encrypted with it. Make one with: python -c \"from cryptography.fernet "
                             "import Fernet; print(Fernet.generate_key().decode())\" and give every worker the same "
                             "key")
        if self.threadkeeper_encryption_key:
            from cryptography.fernet import Fernet

            try:
                for key in self.threadkeeper_encryption_key.split(","):
                    Fernet(key.strip())
            except (ValueError, TypeError):
                raise ValueError("THREADKEEPER_ENCRYPTION_KEY must be Fernet keys (32 bytes in url-safe base64, 44 "
                                 "characters), separated by commas") from None
        return self

    @property
    def slack_installs(self) -> bool:
        """Any workspace that installs the app through OAuth, instead of the one of ``SLACK_BOT_TOKEN``."""
        return bool(self.slack_client_id and self.slack_client_secret)

    @property
    def fast_model(self) -> str:
        return self.ai_fast_model or self.ai_model

    @property
    def fast_model_context_window_tokens(self) -> int | None:
        """The fast model's window override: its own, else the main model's when the fast model is the main one
        (unset, or set to the same name)."""
        if self.ai_fast_model_context_window_tokens is not None:
            return self.ai_fast_model_context_window_tokens
        return self.ai_model_context_window_tokens if self.fast_model == self.ai_model else None

    @property
    def slack_configured(self) -> bool:
        return bool(self.slack_bot_token and (self.slack_app_token or self.slack_signing_secret)) or self.slack_installs

    def slack_half_set(self) -> str | None:
        """When some Slack settings are set but not enough to run the bot: one line saying which are set, which are
        missing and what to do (``run`` stops with it rather than starting the console as if none were set)."""
        given = [name for name, value in (("SLACK_BOT_TOKEN", self.slack_bot_token),
                                          ("SLACK_APP_TOKEN", self.slack_app_token),
                                          ("SLACK_SIGNING_SECRET", self.slack_signing_secret)) if value]
        if self.slack_configured or not given:
            return None
        missing = [] if self.slack_bot_token else ["SLACK_BOT_TOKEN (the bot token, xoxb-…)"]
        if not (self.slack_app_token or self.slack_signing_secret):
            missing.append("SLACK_APP_TOKEN (Socket Mode, xapp-…) or SLACK_SIGNING_SECRET (HTTP events)")
        named, lacking = " and ".join(given), " and ".join(missing)
        return (f"Slack is half configured: {named} {'is' if len(given) == 1 else 'are'} set but {lacking} "
                f"{'is' if len(missing) == 1 else 'are'} not. Set {'them' if len(missing) > 1 else 'it'} to run the "
                f"Slack bot, or unset {named} (environment or .env) to chat in the local console")


_MAX_DB = 2**31 - 1
"""The largest database number Redis's ``databases`` setting allows (the server says which of them it has)."""


def _check_redis_url(url: str) -> None:
    """A ``REDIS_URL`` the client reads as it is written: its port a number from 1 to 65535, its database (the path
    of ``redis://host:port/<db>``, or ``?db=``) a whole number, else a ``ValueError`` saying what is wrong (redis-py
    would read ``/abc`` as database 0 and ``/2/3`` as 23, someone else's data)."""
    from urllib.parse import parse_qs, urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"not a URL redis-py can read: {exc}") from None
    if port == 0:
        raise ValueError("the port must be 1 to 65535")
    dbs = parse_qs(parts.query).get("db", [])
    if parts.scheme != "unix" and parts.path.strip("/"):
        dbs.append(parts.path[1:])
    for db in dbs:
        if not db.isascii() or not db.isdigit() or int(db) > _MAX_DB:
            raise ValueError(f"the database must be a whole number from 0 to {_MAX_DB}, not {db[:40]!r}")


def export_dotenv(path: str = ".env") -> list[str]:
    """Put the ``.env`` variables that the environment does not set into it, so that the model providers
    (litellm reads ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``OLLAMA_API_BASE``, …) see them too. The
    environment wins over the file. Returns the names exported."""
    from dotenv import dotenv_values

    exported = []
    for name, value in dotenv_values(path).items():
        if value is not None and name not in os.environ:
            os.environ[name] = value
            exported.append(name)
    return exported


def load_settings(**overrides: Any) -> Settings:
    """Read the settings (and export ``.env`` to the environment); raise :class:`SettingsError` naming each
    invalid variable."""
    export_dotenv()
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            if not err["loc"]:  # a rule across settings: its message names them (never the values: secrets)
                problems.append(err["msg"].removeprefix("Value error, "))
                continue
            name = str(err["loc"][0]).upper()
            shown = err.get("input")
            if isinstance(shown, str):
                shown = "(set)" if name.startswith("SLACK_") and name != "SLACK_API_BASE_URL" else without_password(shown)
            problems.append(f"{name}={shown!r}: {err['msg']}")
        raise SettingsError("invalid configuration: " + "; ".join(problems)) from None
