"""Import litellm the way Threadkeeper needs it: offline price map, no tokenizer downloads, quiet."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

os.environ.setdefault("LITELLM_LOG", "WARNING")
# litellm would otherwise load the first .env found walking up from its own install directory; Threadkeeper
# reads the .env of the working directory itself (``threadkeeper.settings.export_dotenv``).
os.environ.setdefault("LITELLM_MODE", "PRODUCTION")

import logging  # noqa: E402

import litellm  # noqa: E402
import litellm.litellm_core_utils.default_encoding  # noqa: E402,F401  (points tiktoken at litellm's bundled cache)
from litellm.llms.custom_llm import CustomLLM  # noqa: E402  (litellm does not export it to type checkers)

litellm.suppress_debug_info = True
litellm.disable_hf_tokenizer_download = True
litellm.telemetry = False
for _name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
    logging.getLogger(_name).setLevel(logging.WARNING)


def register_provider(name: str, handler: CustomLLM) -> None:
    """Register (or replace) a custom litellm provider, so ``name/<model>`` routes to ``handler``."""
    entries = [e for e in litellm.custom_provider_map if e["provider"] != name]
    entries.append({"provider": name, "custom_handler": handler})
    litellm.custom_provider_map = entries
    litellm.utils.custom_llm_setup()  # type: ignore[no-untyped-call]  # litellm leaves it unannotated


__all__ = ["CustomLLM", "litellm", "register_provider"]
