"""The pace a whole fleet keeps with an outside service's rate-limited method: at most one call per interval,
whichever worker makes it, and none before the time the service said to wait (``Retry-After``)."""

from __future__ import annotations

from .base import RedisStore


class Pace(RedisStore):
    def _key(self, name: str) -> str:
        return f"{self.prefix}:pace:{name}"

    async def take(self, name: str, interval_seconds: float) -> float:
        """Take the next call of ``name``: 0.0 when it may be made now (the next one then waits ``interval_seconds``),
        else how many seconds are left before it may. One round trip."""
        pipe = self.client.pipeline(transaction=False)
        key = self._key(name)
        pipe.set(key, "1", nx=True, px=max(1, int(interval_seconds * 1000)))
        pipe.pttl(key)
        taken, left_ms = await self._call(pipe.execute())
        if taken:
            return 0.0
        return max(0.001, int(left_ms) / 1000) if int(left_ms) > 0 else 0.001

    async def hold(self, name: str, seconds: float) -> None:
        """No call of ``name`` for ``seconds`` (the service said so), whatever the interval."""
        await self._call(self.client.set(self._key(name), "1", px=max(1, int(seconds * 1000))))
