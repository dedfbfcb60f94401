"""Summarizers the tests register as litellm providers: each writes its narrative from the request's body by a rule
of its own, and every one counts its calls and keeps what it was given."""

from __future__ import annotations

from typing import Any

from litellm import CustomLLM, ModelResponse


class RecordingSummarizer(CustomLLM):
    """Answers each call with :meth:`narrative` of the request's last message; counts calls and keeps the bodies."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.inputs: list[str] = []

    def narrative(self, body: str) -> str:
        raise NotImplementedError

    async def acompletion(self, model: str, messages: list, *args: Any, **kwargs: Any  # type: ignore[override]
                          ) -> ModelResponse:
        self.calls += 1
        body = messages[-1]["content"]
        self.inputs.append(body)
        return ModelResponse(model=model, choices=[{"index": 0, "message": {"role": "assistant",
                                                                            "content": self.narrative(body)},
                                                    "finish_reason": "stop"}],
                             usage={"prompt_tokens": len(body) // 4, "completion_tokens": 20, "total_tokens": 0})
