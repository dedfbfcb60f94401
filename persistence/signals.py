"""Requests one worker makes of whichever worker runs a conversation's turn: stop it (a person pressed Slack's stop
button, and Slack told some worker). Sent over Redis pub/sub: nothing is stored and nothing polled; a worker that is
not listening at that moment misses it (the turn then finishes as it would have)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from .base import RedisStore


class Signals(RedisStore):
    @property
    def channel(self) -> str:
        return f"{self.prefix}:stop"

    async def stop(self, conversation_id: str) -> int:
        """Ask the worker running ``conversation_id``'s turn to stop it; how many workers heard the request."""
        return int(await self._call(self.client.publish(self.channel, conversation_id)))

    async def stops(self) -> AsyncIterator[str]:
        """The conversations whose turns a person asked to stop, as the requests arrive (until cancelled)."""
        pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        await self._call(pubsub.subscribe(self.channel))
        try:
            while True:
                message = await pubsub.get_message(timeout=30.0)
                if message is not None and message.get("type") == "message":
                    data = message["data"]
                    yield data.decode() if isinstance(data, bytes) else str(data)
        finally:
            await pubsub.unsubscribe(self.channel)
            await pubsub.aclose()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
