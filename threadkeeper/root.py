"""The composition root: builds the real object graph from settings.

Tests build their graphs at this same seam (passing a fake Redis or a scripted model) instead of
patching globals.
"""

from __future__ import annotations

import logging
from typing import Any

from threadkeeper.services import (
    SYSTEM_PROMPT,
    BudgetError,
    ContextBudget,
    ExecutorConfig,
    ModelClient,
    Pipeline,
    ReplyExecutor,
    Tool,
    ToolRegistry,
    Turns,
    is_offline,
    offers_tools,
    resolve_max_output,
    resolve_window,
)
from threadkeeper.services.handoff import Compactor, Summarizer, record_state_tool
from threadkeeper.services.memory import ChannelAccess, Memory, MemoryConfig
from threadkeeper.services.models import MESSAGE_OVERHEAD, EmbeddingClient, OfflineModel, tokenizer_for
from threadkeeper.services.recall import Recall, lineage_resolver, thread_search_tool
from threadkeeper.services.turn import Clock, ContextAssembler, ModelLoop, NoteEffects, Preview, TurnInput, tool_tokens

from .settings import Settings, SettingsError
from .stores import Stores, build_stores

# Stores and build_stores are re-exported: the composition root builds both.
__all__ = ["Stores", "build_pipeline", "build_slack_bot", "build_stores", "check_models", "memory_config"]


def check_models(settings: Settings) -> None:
    """At start-up: each configured model is one litellm can call, with a known window and its provider's
    key set; otherwise stop with one line naming the variable (instead of failing every turn). The offline model is
    no provider: with only it configured, litellm is never imported."""
    for variable, name, window in (("AI_MODEL", settings.ai_model, settings.ai_model_context_window_tokens),
                                   ("AI_FAST_MODEL", settings.fast_model, settings.fast_model_context_window_tokens)):
        if is_offline(name):
            continue
        from threadkeeper.services.models._litellm import litellm

        try:
            litellm.get_llm_provider(name)
        except Exception as exc:  # litellm raises its BadRequestError for an unknown provider
            said = str(exc).splitlines()[0][:160]
            raise SettingsError(f"{variable}={name!r} is not a model litellm can call ({said}): "
                                "name it as litellm does, provider/model (openai/gpt-4o-mini, ollama_chat/llama3.1, …)"
                                ) from None
        missing = [k for k in litellm.validate_environment(model=name).get("missing_keys") or []
                   if k.endswith(("_KEY", "_TOKEN"))]
        if missing:
            raise SettingsError(f"{variable}={name!r} needs {', '.join(missing)} set (in the environment or .env): "
                                "the provider's key")
        try:
            resolve_window(name, window, variable=f"{variable}_CONTEXT_WINDOW_TOKENS")
        except BudgetError as exc:
            raise SettingsError(str(exc)) from None
        _check_reachable(variable, name)
    if settings.ai_embedding_model:
        _check_embedding_model(settings.ai_embedding_model)


def _check_embedding_model(name: str) -> None:
    """``AI_EMBEDDING_MODEL``: a model litellm can route, its key set, its server (when it has a base URL) answering."""
    from threadkeeper.services.models._litellm import litellm

    variable = "AI_EMBEDDING_MODEL"
    try:
        litellm.get_llm_provider(name)
    except Exception as exc:  # litellm raises its BadRequestError for an unknown provider
        said = str(exc).splitlines()[0][:160]
        raise SettingsError(f"{variable}={name!r} is not a model litellm can call ({said}): name it as litellm does, "
                            "provider/model (openai/text-embedding-3-small, ollama/nomic-embed-text, …)") from None
    missing = [k for k in litellm.validate_environment(model=name).get("missing_keys") or []
               if k.endswith(("_KEY", "_TOKEN"))]
    if missing:
        raise SettingsError(f"{variable}={name!r} needs {', '.join(missing)} set (in the environment or .env): "
                            "the provider's key")
    _check_reachable(variable, name)


_BASE_URLS = {"openai": ("OPENAI_BASE_URL", "OPENAI_API_BASE"), "ollama": ("OLLAMA_API_BASE",),
              "ollama_chat": ("OLLAMA_API_BASE",), "hosted_vllm": ("HOSTED_VLLM_API_BASE",)}
_DEFAULT_BASES = {"ollama": "http://localhost:11434", "ollama_chat": "http://localhost:11434"}


def _check_reachable(variable: str, name: str) -> None:
    """A model served from a base URL (a local or self-hosted server) must answer a TCP connection at
    start-up; hosted providers' own endpoints are not probed."""
    import os
    import socket
    from urllib.parse import urlsplit

    provider = name.split("/", 1)[0]
    names = _BASE_URLS.get(provider, ())
    setting = next((v for v in names if os.environ.get(v)), None)
    url = os.environ[setting] if setting else _DEFAULT_BASES.get(provider)
    if not url:
        return
    parts = urlsplit(url if "://" in url else f"http://{url}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname or "localhost", port), timeout=3).close()
    except OSError as exc:
        where = f"{setting}={url}" if setting else f"{url} (the default; set {names[0]} if it runs elsewhere)"
        raise SettingsError(f"{variable}={name!r} is served from {where}, which does not answer ({exc}): start that "
                            f"server, or point {setting or names[0]} at the one that serves the model") from None


def memory_config(settings: Settings) -> MemoryConfig:
    def ids(value: str) -> frozenset[str]:
        return frozenset(v.strip() for v in value.split(",") if v.strip())

    return MemoryConfig(workspaces=ids(settings.threadkeeper_memory_workspaces),
                        channels=ids(settings.threadkeeper_memory_channels),
                        idle_seconds=settings.threadkeeper_memory_idle_minutes * 60,
                        ttl_days=settings.threadkeeper_memory_ttl_days,
                        max_unused_days=settings.threadkeeper_memory_max_unused_days,
                        model_calls_per_day=settings.threadkeeper_memory_model_calls_per_day)


def build_pipeline(settings: Settings, stores: Stores, *, model: str | None = None,
                   context_window: int | None = None, tools: list[Tool] | None = None,
                   summarizer_model: str | None = None, retry_wait_seconds: float = 1.0,
                   compactor_class: type[Compactor] = Compactor, offline_model: OfflineModel | None = None,
                   access: ChannelAccess | None = None) -> Pipeline:
    """The pipeline for ``model`` (default ``AI_MODEL``) with the window from litellm or the override.

    ``compactor_class`` swaps the compaction strategy (the evals compare baselines this way).
    ``offline_model`` replaces the offline model's default instance (the bench gives it a latency).
    ``access`` tells memory who may see a channel (the Slack bot's: asked of Slack; default: nobody can be asked,
    so only what the bot recorded when messages arrived counts).
    The summarizer uses ``summarizer_model`` (default ``AI_FAST_MODEL``, else the main model); with the
    offline model the narrative is extractive and compaction makes no model call. What runs turns is built when
    first used (a command that only reads what is stored never loads the model's stack).
    """

    def turns() -> Turns:
        return _build_turns(settings, stores, model=model, context_window=context_window, tools=tools,
                            summarizer_model=summarizer_model, retry_wait_seconds=retry_wait_seconds,
                            compactor_class=compactor_class, offline_model=offline_model, access=access)

    return Pipeline(checkpoints=stores.checkpoints, inbox=stores.inbox, notes=stores.notes, forgetter=stores.forget,
                    memory_store=stores.memory, signals=stores.signals, pace=stores.pace,
                    turns=turns)


def _build_turns(settings: Settings, stores: Stores, *, model: str | None, context_window: int | None,
                 tools: list[Tool] | None, summarizer_model: str | None, retry_wait_seconds: float,
                 compactor_class: type[Compactor], offline_model: OfflineModel | None,
                 access: ChannelAccess | None) -> Turns:
    model_name = model or settings.ai_model
    override = context_window or (settings.ai_model_context_window_tokens if model is None or
                                  model == settings.ai_model else None)
    tokenizer = tokenizer_for(model_name)
    max_output = resolve_max_output(model_name, settings.ai_max_output_tokens)
    window = resolve_window(model_name, override)
    client = ModelClient(model_name, timeout_seconds=settings.ai_timeout_seconds, max_output_tokens=max_output,
                         attempts=settings.ai_retry_attempts, retry_wait_seconds=retry_wait_seconds,
                         context_window=window, offline_model=offline_model)
    embedder = EmbeddingClient(settings.ai_embedding_model, timeout_seconds=min(settings.ai_timeout_seconds, 15.0)) \
        if settings.ai_embedding_model else None
    recall = Recall(stores.checkpoints, stores.notes, tokenizer, embedder=embedder, vectors=stores.vectors,
                    epochs=stores.epochs, max_bytes=settings.threadkeeper_cache_mb * 1024 * 1024)
    registry = ToolRegistry([record_state_tool(lineage_resolver(recall, stores.checkpoints)), *(tools or [])])
    if offers_tools(model_name):
        registry.register(thread_search_tool(recall, stores.checkpoints, lambda: tool_tokens(budget, config)))
    fixed = tokenizer.count(SYSTEM_PROMPT) + MESSAGE_OVERHEAD + tokenizer.count_tools(registry.schemas())
    budget = ContextBudget.derive(window, fixed_prompt_tokens=fixed,
                                  max_output_tokens=max_output)
    fast_name = summarizer_model or (settings.fast_model if model is None else model_name)
    if fast_name == model_name:
        fast_client, fast_window = client, budget.window_tokens
    else:
        fast_window = resolve_window(fast_name, settings.fast_model_context_window_tokens,
                                     variable="AI_FAST_MODEL_CONTEXT_WINDOW_TOKENS")
        fast_client = ModelClient(fast_name, timeout_seconds=settings.ai_timeout_seconds,
                                  attempts=settings.ai_retry_attempts, retry_wait_seconds=retry_wait_seconds,
                                  context_window=fast_window, setting="AI_FAST_MODEL")
    summarizer = Summarizer(fast_client, tokenizer, window_tokens=fast_window,
                            timeout_seconds=min(settings.ai_timeout_seconds, 60.0))
    compactor = compactor_class(checkpoints=stores.checkpoints, notes=stores.notes, tokenizer=tokenizer,
                                summarizer=summarizer, fixed_prompt_tokens=fixed)
    memory = Memory(stores.memory, stores.checkpoints, stores.notes, tokenizer, config=memory_config(settings),
                    access=access, model=fast_client, retention_days=settings.threadkeeper_retention_days)
    config = ExecutorConfig(system_prompt=SYSTEM_PROMPT, lease_seconds=settings.threadkeeper_lease_seconds,
                            turn_model_seconds=settings.ai_turn_seconds,
                            prepare_compaction=settings.threadkeeper_prepare_compaction)
    clock = Clock()
    tool_limit = tool_tokens(budget, config)
    turn_input = TurnInput(tokenizer=tokenizer, budget=budget, clock=clock)
    assembler = ContextAssembler(tokenizer=tokenizer, budget=budget, tool_tokens=tool_limit, recall=recall,
                                 memory=memory, clock=clock)
    loop = ModelLoop(checkpoints=stores.checkpoints, model=client, tools=registry, budget=budget, tokenizer=tokenizer,
                     config=config, messages=turn_input)
    executor = ReplyExecutor(checkpoints=stores.checkpoints, inbox=stores.inbox, leases=stores.leases, budget=budget,
                             config=config, input=turn_input, assembler=assembler, loop=loop, compactor=compactor,
                             effects=NoteEffects(stores.notes, memory), held=stores.notes)
    preview = Preview(checkpoints=stores.checkpoints, inbox=stores.inbox, notes=stores.notes, budget=budget,
                      system_prompt=config.system_prompt, input=turn_input, assembler=assembler, compactor=compactor)
    return Turns(executor=executor, preview=preview, clock=clock, compactor=compactor, recall=recall, memory=memory)


def build_slack_bot(settings: Settings, stores: Stores, pipeline: Pipeline) -> Any:
    """The Slack bot over ``pipeline``: for the workspace of ``SLACK_BOT_TOKEN``, or for every workspace that
    installs it (``SLACK_CLIENT_ID`` and ``SLACK_CLIENT_SECRET``; installations kept in Redis)."""
    from slack_bolt.authorization.async_authorize import AsyncInstallationStoreAuthorize
    from slack_bolt.oauth.async_oauth_settings import AsyncOAuthSettings

    from threadkeeper.bot.backfill import HistoryPace
    from threadkeeper.bot.conversations import make_client
    from threadkeeper.bot.slack import SlackBot
    from threadkeeper.bot.workspaces import RedisInstallationStore, RedisStateStore, Workspaces, cipher

    if not settings.slack_bot_token and not settings.slack_installs:
        raise SettingsError("SLACK_BOT_TOKEN is not set: the Slack bot needs the bot token (xoxb-…), or "
                            "SLACK_CLIENT_ID and SLACK_CLIENT_SECRET to be installed in any workspace")
    fast = None
    if not is_offline(settings.fast_model):
        fast = ModelClient(settings.fast_model, timeout_seconds=min(settings.ai_timeout_seconds, 15.0),
                           attempts=1, setting="AI_FAST_MODEL" if settings.ai_fast_model else "AI_MODEL")
    base_url = settings.slack_api_base_url
    oauth = None
    if settings.slack_installs:
        store = RedisInstallationStore(stores.client, settings.threadkeeper_key_prefix,
                                       encryption=cipher(settings.threadkeeper_encryption_key))
        workspaces = Workspaces(lambda token: make_client(token, base_url), installations=store)
        oauth = AsyncOAuthSettings(client_id=settings.slack_client_id, client_secret=settings.slack_client_secret,
                                   scopes=settings.slack_scopes.split(","), redirect_uri=settings.slack_redirect_uri,
                                   installation_store=store,
                                   state_store=RedisStateStore(stores.client, settings.threadkeeper_key_prefix))
        # Bolt checks each event's installation; the auth.test behind it is cached per token, so an event's
        # acknowledgement costs one Redis read, not a Web API call.
        oauth.authorize = AsyncInstallationStoreAuthorize(
            logger=logging.getLogger("threadkeeper.slack"), client_id=settings.slack_client_id, client_secret=settings.slack_client_secret,
            installation_store=store, cache_enabled=True)
        client = make_client(None, base_url)
    else:
        client = make_client(settings.slack_bot_token, base_url)
        workspaces = Workspaces(lambda token: make_client(token, base_url), token=settings.slack_bot_token)
    if pipeline.memory is not None:  # who may see a channel's memory: asked of Slack, cached briefly
        from threadkeeper.bot.memory_access import SlackAccess
        from threadkeeper.services.memory import CachedAccess

        memory = pipeline.memory
        memory.access = CachedAccess(SlackAccess(workspaces), memory.config.membership_seconds)
    return SlackBot(pipeline=pipeline, workspaces=workspaces, client=client,
                    signing_secret=settings.slack_signing_secret, fast_model=fast, oauth=oauth,
                    surface=settings.threadkeeper_slack_surface,
                    history=HistoryPace.of(settings.threadkeeper_slack_history, installs=settings.slack_installs,
                                           interval_seconds=settings.threadkeeper_slack_history_interval_seconds))
