"""``threadkeeper bench --quick`` runs against the real Redis and reports every metric as a number."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import REDIS_URL, real_redis
from test_budget_and_cli import cli

from threadkeeper.bench import REQUIRED, checked


@pytest.mark.redis
async def test_quick_bench_reports_every_metric(tmp_path: Path, prefix: str) -> None:
    client = await real_redis()
    await client.aclose()
    out, svg = tmp_path / "bench.json", tmp_path / "bench.svg"
    result = cli("bench", "--quick", "--json", str(out), "--plot", str(svg), env={"REDIS_URL": REDIS_URL, "THREADKEEPER_KEY_PREFIX": prefix},
                 timeout=300)
    assert result.returncode == 0, result.stderr
    metrics = json.loads(out.read_text())
    missing = [k for k in REQUIRED if k not in metrics]
    assert not missing, missing
    assert all(isinstance(v, (int, float)) for v in metrics.values())
    assert metrics["concurrent_1000_errors"] == 0 and metrics["concurrent_1000_errors_litellm"] == 0
    assert "langgraph-checkpoint-redis not measured: " in result.stdout, "the bench says why the peer is skipped"
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
