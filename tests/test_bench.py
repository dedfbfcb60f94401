"""``threadkeeper bench --quick`` runs against the real Redis and reports every metric as a number."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import redis
from conftest import REDIS_URL, real_redis
from test_budget_and_cli import cli

from threadkeeper.bench import REQUIRED, checked


@pytest.mark.redis
@pytest.mark.slow(240)
async def test_quick_bench_reports_every_metric(tmp_path: Path, prefix: str) -> None:
    client = await real_redis()
    await client.aclose()
    out, svg = tmp_path / "bench.json", tmp_path / "bench.svg"
    result = cli("bench", "--quick", "--json", str(out), "--plot", str(svg), env={"REDIS_URL": REDIS_URL, "THREADKEEPER_KEY_PREFIX": prefix},
                 timeout=420, fresh=True)
    assert result.returncode == 0, result.stderr
    metrics = json.loads(out.read_text())
    missing = [k for k in REQUIRED if k not in metrics]
    assert not missing, missing
    assert all(isinstance(v, (int, float)) for v in metrics.values())
    assert metrics["concurrent_1000_errors"] == 0 and metrics["concurrent_1000_errors_litellm"] == 0
    measured, skipped = "langgraph_redis_turn_ratio_10000" in metrics, "langgraph-checkpoint-redis not measured: "
    assert measured != (skipped in result.stdout), "LangGraph's Redis saver has its row, or the bench says why not"
    assert "targets: " in result.stdout and " of " in result.stdout and "≤ 1.5" in result.stdout, \
        "the quick run shows the targets of what it measured"
    assert metrics["write_bytes_per_turn_10000"] <= 1.5 * metrics["write_bytes_per_turn_100"]
    assert "≤ 1.2" in result.stdout, "the slow-summarizer row shows its target"
    assert metrics["compacting_turns_with_slow_summarizer"] >= 1
    assert metrics["compactions_planned_ahead_with_slow_summarizer"] == metrics["compacting_turns_with_slow_summarizer"], \
        "every compacting turn adopted the handoff planned ahead"
    drawn = {"".join(t.itertext()) for t in ET.parse(svg).iter("{http://www.w3.org/2000/svg}text")}
    assert {t.metric for t in checked(metrics)} <= drawn, "the picture has a row for each metric with a target"
    leftovers = await (await real_redis()).keys(f"tkbench-{prefix}-*")
    assert leftovers == [], "the bench removes its own keys (other runs on this Redis are theirs)"


@pytest.mark.redis
async def test_the_newcomers_console_without_a_redis_server_uses_a_prefix_of_its_own_and_removes_it(
        prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a machine with no ``redis-server`` to embed, the bench's console rows run on the bench's Redis: in an empty
    store of their own (never the default prefix, where someone's data may be) that is gone afterwards."""
    from threadkeeper import bench, embedded

    client = await real_redis()
    default = "tk:{console:*"
    before = set(await client.keys(default))
    seen: list[list[bytes]] = []
    remove = bench._remove_keys

    def spied(url: str, own: str) -> None:
        with redis.Redis.from_url(url) as sync:
            seen.append(sync.keys(f"{own}:*"))
        remove(url, own)

    monkeypatch.setattr(embedded, "find_server", lambda: None)
    monkeypatch.setattr(bench, "_remove_keys", spied)
    monkeypatch.setenv("REDIS_URL", REDIS_URL)  # as in a bench run under REDIS_URL=…
    try:
        seconds, peak = bench._newcomer_console(b"the deploy is on friday\n", url=REDIS_URL, prefix=prefix)
        assert seconds > 0 and peak > 0
        assert len(seen) == 1 and any(b"{console:local}" in k for k in seen[0]), \
            "the console stored its conversation under its own prefix on the bench's Redis"
        assert all(k.startswith(f"{prefix}:console-".encode()) for k in seen[0])
        assert set(await client.keys(default)) == before, "nothing written under the default prefix"
        assert await client.keys(f"{prefix}:*") == [], "and nothing of its own left behind"
    finally:
        stray = [*(set(await client.keys(default)) - before), *await client.keys(f"{prefix}:*")]
        if stray:
            await client.delete(*stray)
        await client.aclose()


@pytest.mark.redis
def test_the_console_peak_is_the_consoles_own_whatever_the_bench_held(prefix: str) -> None:
    """Linux carries a process's high-water RSS across ``exec`` into what ``ru_maxrss`` reports: a bench that has
    held more than the console must still read the console's own peak, not its own."""
    import resource

    from threadkeeper import bench

    held = bytearray(200 * 1024 * 1024)
    held[::4096] = b"\x01" * len(held[::4096])  # touched, so it is resident
    bench_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    _, console_peak = bench._newcomer_console(b"", url=REDIS_URL, prefix=prefix)
    del held
    assert 20 < console_peak < bench_peak - 50, (console_peak, bench_peak)
