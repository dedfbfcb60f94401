"""Which workspaces the bot serves and how it talks to each.

Two modes, chosen by the settings:

* **One token** (``SLACK_BOT_TOKEN``): the workspace the token belongs to (``auth.test``); events from any
  other team are foreign.
* **Installs** (``SLACK_CLIENT_ID`` and ``SLACK_CLIENT_SECRET``): any workspace that installed the app
  through Bolt's OAuth flow (``/slack/install``). Installations and OAuth states live in Redis
  (:class:`RedisInstallationStore`, :class:`RedisStateStore`), so every worker of a fleet serves every
  workspace and a restart forgets none. A workspace without an installation is foreign. Installations hold
  bot (and user and refresh) tokens, so they are stored encrypted with Fernet (``cryptography``) under
  ``THREADKEEPER_ENCRYPTION_KEY``; an installation stored in plain text by an earlier version is read and
  stored again encrypted.

Either way a conversation's team (the first part of its id) names the client its replies, reactions and
lookups use, and the bot's own user id in that workspace.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore
from slack_sdk.oauth.installation_store.models import Bot, Installation
from slack_sdk.oauth.state_store.async_state_store import AsyncOAuthStateStore
from slack_sdk.web.async_client import AsyncWebClient

from threadkeeper.persistence import ThreadkeeperError
from threadkeeper.persistence.base import glob_escape
from threadkeeper.persistence.keys import installation_key, oauth_state_key

log = logging.getLogger("threadkeeper.slack")

STATE_SECONDS = 600
"""How long an OAuth ``state`` issued by ``/slack/install`` stays valid."""
KEY_WRONG = "cannot decrypt stored installations"
"""What ``/healthz`` says of ``THREADKEEPER_ENCRYPTION_KEY`` when it is not the key installations were stored with."""


class _InRedis:
    """A Slack OAuth store kept in Redis under the deployment's key prefix."""

    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    @property
    def logger(self) -> logging.Logger:
        return log


class EncryptionKeyError(ThreadkeeperError):
    """The encryption key is missing, malformed, or not the one stored installations were encrypted with."""


def cipher(keys: str | None) -> MultiFernet:
    """The cipher of ``THREADKEEPER_ENCRYPTION_KEY``: one Fernet key, or several separated by commas to rotate
    (the first encrypts; every one decrypts)."""
    parts = [k.strip() for k in (keys or "").split(",") if k.strip()]
    if not parts:
        raise EncryptionKeyError(
            "THREADKEEPER_ENCRYPTION_KEY is not set: installs through OAuth (SLACK_CLIENT_ID) store each "
            "workspace's bot token encrypted with it. Make one with: python -c \"from cryptography.fernet import "
            "Fernet; print(Fernet.generate_key().decode())\" and give every worker the same key")
    try:
        return MultiFernet([Fernet(k) for k in parts])
    except (ValueError, TypeError):
        raise EncryptionKeyError("THREADKEEPER_ENCRYPTION_KEY must be Fernet keys (32 bytes in url-safe base64, "
                                 "44 characters), separated by commas") from None


class RedisInstallationStore(_InRedis, AsyncInstallationStore):
    """The latest installation and bot token of each workspace, one Redis hash per workspace, encrypted."""

    def __init__(self, client: Any, prefix: str, *, encryption: MultiFernet) -> None:
        super().__init__(client, prefix)
        self.encryption = encryption

    def _key(self, enterprise_id: str | None, team_id: str | None, is_enterprise_install: bool | None = False) -> str:
        return installation_key(self.prefix, enterprise_id, None if is_enterprise_install else team_id)

    def _seal(self, value: Any) -> bytes:
        return self.encryption.encrypt(json.dumps(value.__dict__).encode())

    async def _open(self, key: str, field: str) -> dict[str, Any] | None:
        raw = await self.client.hget(key, field)
        if not raw:
            return None
        raw = raw if isinstance(raw, bytes) else raw.encode()
        if raw.lstrip().startswith(b"{"):  # stored in plain text by an earlier version: sealed now
            value: dict[str, Any] = json.loads(raw)
            await self.client.hset(key, field, self.encryption.encrypt(raw))
            return value
        try:
            value = json.loads(self.encryption.decrypt(raw))
        except InvalidToken:
            raise EncryptionKeyError(f"the installation stored at {key} cannot be decrypted: "
                                     "THREADKEEPER_ENCRYPTION_KEY is not the key it was stored with (to change "
                                     "keys, list the new one first and keep the old one after it)") from None
        return value

    def _keys(self) -> Any:
        return self.client.scan_iter(match=f"{glob_escape(self.prefix)}:{{install:*", count=1000)

    async def _try(self, key: bytes | str) -> None:
        """Open both records of one stored installation (:class:`EncryptionKeyError` when the key cannot)."""
        for field in ("bot", "installation"):
            await self._open(key.decode() if isinstance(key, bytes) else key, field)

    async def check(self) -> int:
        """How many installations are stored, after opening one with the key (:class:`EncryptionKeyError` when it
        is not the key they were stored with)."""
        keys = [k async for k in self._keys()]
        for key in keys[:1]:
            await self._try(key)
        return len(keys)

    async def opens_one(self) -> bool:
        """Open the first stored installation found with the key: False when none is stored,
        :class:`EncryptionKeyError` when the key cannot open it. Stops scanning at the first one."""
        async with contextlib.aclosing(self._keys()) as keys:
            async for key in keys:
                await self._try(key)
                return True
        return False

    async def async_save(self, installation: Installation) -> None:
        key = self._key(installation.enterprise_id, installation.team_id, installation.is_enterprise_install)
        fields = {"installation": self._seal(installation)}
        bot = installation.to_bot()
        if bot.bot_token:
            fields["bot"] = self._seal(bot)
        await self.client.hset(key, mapping=fields)

    async def async_save_bot(self, bot: Bot) -> None:
        if bot.bot_token:
            key = self._key(bot.enterprise_id, bot.team_id, bot.is_enterprise_install)
            await self.client.hset(key, "bot", self._seal(bot))

    async def async_find_bot(self, *, enterprise_id: str | None, team_id: str | None,
                             is_enterprise_install: bool | None = False) -> Bot | None:
        value = await self._open(self._key(enterprise_id, team_id, is_enterprise_install), "bot")
        return Bot(**value) if value else None

    async def async_find_installation(self, *, enterprise_id: str | None, team_id: str | None,
                                      user_id: str | None = None,
                                      is_enterprise_install: bool | None = False) -> Installation | None:
        value = await self._open(self._key(enterprise_id, team_id, is_enterprise_install), "installation")
        return Installation(**value) if value else None

    async def async_delete_bot(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        await self.client.hdel(self._key(enterprise_id, team_id), "bot")

    async def async_delete_installation(self, *, enterprise_id: str | None, team_id: str | None,
                                        user_id: str | None = None) -> None:
        await self.client.hdel(self._key(enterprise_id, team_id), "installation")

    async def async_delete_all(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        await self.client.delete(self._key(enterprise_id, team_id))


class RedisStateStore(_InRedis, AsyncOAuthStateStore):
    """OAuth ``state`` values, each valid once and for ``STATE_SECONDS``, shared by every worker."""

    async def async_issue(self, *args: Any, **kwargs: Any) -> str:
        state = uuid.uuid4().hex
        await self.client.set(oauth_state_key(self.prefix, state), "1", ex=STATE_SECONDS)
        return state

    async def async_consume(self, state: str) -> bool:
        return bool(await self.client.delete(oauth_state_key(self.prefix, state)))


@dataclass(frozen=True)
class Identity:
    """The bot in one workspace."""

    team_id: str
    user_id: str | None
    bot_id: str | None


class Workspaces:
    """The Web API client and the bot's identity for each workspace the bot serves."""

    def __init__(self, make_client: Callable[[str], AsyncWebClient], *, token: str | None = None,
                 installations: RedisInstallationStore | None = None) -> None:
        if (token is None) == (installations is None):
            raise ValueError("give either one bot token or an installation store")
        self.make_client = make_client
        self.token = token
        self.installations = installations
        self._clients: dict[str, AsyncWebClient] = {}
        self._identities: dict[str, Identity] = {}
        self._single: Identity | None = None
        self._key_state: tuple[str | None, float] = (None, 0.0)

    async def _single_identity(self) -> Identity:
        if self._single is None:
            assert self.token is not None
            client = self._clients.setdefault("", self.make_client(self.token))
            auth = await client.auth_test()
            self._single = Identity(auth.get("team_id") or "", auth.get("user_id"), auth.get("bot_id"))
        return self._single

    async def client(self, team: str) -> AsyncWebClient | None:
        """The client for ``team``; None when the bot does not serve it (another workspace, or uninstalled)."""
        if self.token is not None:
            single = await self._single_identity()
            return self._clients[""] if team in (single.team_id, "T") else None
        cached = self._clients.get(team)
        if cached is not None:
            return cached
        assert self.installations is not None
        bot = await self.installations.async_find_bot(enterprise_id=None, team_id=team)
        if bot is None or not bot.bot_token:
            return None
        client = self._clients[team] = self.make_client(bot.bot_token)
        self._identities[team] = Identity(team, bot.bot_user_id, bot.bot_id)
        return client

    async def identity(self, team: str) -> Identity | None:
        """The bot's user and bot ids in ``team`` (None when it does not serve that team)."""
        if self.token is not None:
            single = await self._single_identity()
            return single if team in (single.team_id, "T") else None
        if team not in self._identities and await self.client(team) is None:
            return None
        return self._identities.get(team)

    async def installed(self) -> int:
        """How many workspaces installed the app (installs mode), after opening one of them with the encryption
        key: a worker with the wrong key stops at start instead of failing every event."""
        assert self.installations is not None
        return await self.installations.check()

    key_seconds = 60.0
    """How long ``/healthz`` reuses what it learned of the encryption key (finding an installation scans keys)."""

    async def encryption_key(self) -> str:
        """For ``/healthz``: ``not used`` (one token), ``no installations``, ``ok`` (a stored installation opens
        with the key), or :data:`KEY_WRONG`; asked of Redis at most every :attr:`key_seconds`."""
        if self.installations is None:
            return "not used"
        state, at = self._key_state
        if state is None or time.monotonic() - at >= self.key_seconds:
            try:
                state = "ok" if await self.installations.opens_one() else "no installations"
            except EncryptionKeyError:
                state = KEY_WRONG
                log.error("THREADKEEPER_ENCRYPTION_KEY cannot decrypt the stored installations: every event of an "
                          "installed workspace fails; /healthz answers not ready")
            self._key_state = (state, time.monotonic())
        return state

    async def remove(self, team: str) -> None:
        """Forget ``team``'s installation (install mode) and the cached client."""
        self._clients.pop(team, None)
        self._identities.pop(team, None)
        if self.installations is not None:
            await self.installations.async_delete_all(enterprise_id=None, team_id=team)
