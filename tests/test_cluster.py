"""Threadkeeper on a Redis Cluster: the Slack bot, the pipeline with compaction and recall, and the command
line, against a 3-master cluster started on loopback ports (the store contract suite runs there too)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import prestarted
from fakes import Step, pipeline, scripted
from slack_fake import event_body
from test_slack_bot import CHANNEL, make_harness, mention, thread_message

from threadkeeper.persistence import CheckpointKind


async def test_the_slack_bot_answers_threads_spread_over_the_cluster(prefix, cluster_client, monkeypatch) -> None:
    import test_slack_bot

    model = scripted()
    model.default = Step(text="On it.")
    monkeypatch.setattr(test_slack_bot, "scripted", lambda: model)
    h, http = await make_harness(prefix, cluster_client)
    try:
        roots = [f"17000{i:05d}.000100" for i in range(6)]
        for i, root in enumerate(roots):
            assert await h.post(event_body(mention(root, f"status of service {i}?"), event_id=f"Ev-c{i}")) == 200
            assert await h.post(event_body(thread_message(f"17000{i:05d}.000200", "the canary is green", root),
                                           event_id=f"Ev-c{i}-t")) == 200
        await h.settle()
        assert sorted(r["thread_ts"] for r in h.replies()) == roots
        nodes = set()
        for root in roots:
            cid = f"slack:T1:{CHANNEL}:{root}"
            history = await h.pipeline.checkpoints.load_history(cid)
            assert [m.text for m in history.messages if m.role == "user"][:2] == [f"status of service {roots.index(root)}?",
                                                                                  "the canary is green"]
            nodes.add(cluster_client.get_node_from_key(h.stores.checkpoints.keys(cid).state).name)
        assert len(nodes) >= 2, "the conversations live on more than one node"
    finally:
        await h.settle()
        await http.close()
        await h.slack.close()


async def test_compaction_and_recall_on_the_cluster(prefix, cluster_client) -> None:
    model = scripted()
    model.default = Step(text="noted")
    p, _ = pipeline(prefix, cluster_client, context_window=4096)
    conv = "slack:T1:C9:1700000000.000300"
    await p.submit(conv, "The billing outage ticket is OPS-4471.", author="alice", id="1700.000000")
    await p.run(conv)
    for i in range(1, 80):
        await p.submit(conv, f"status update {i}: lunch was good and the team sync moved to the big room again; "
                             "someone brought pastries, the weather held, and nothing else happened worth noting",
                       author="bob", id=f"1700.{i:06d}")
        if i % 5 == 0:
            await p.run(conv)
    await p.run(conv)
    lineage = await p.checkpoints.lineage(conv)
    assert any(row.kind is CheckpointKind.COMPACTION for row in lineage)
    report = await p.compact(conv, reason="manual")
    assert report.new_checkpoint_id and (await p.checkpoints.get_state(conv)).head_checkpoint_id == \
        report.new_checkpoint_id
    preview = await p.context(conv, arriving=[p.message("what was the billing outage ticket?")])
    assert any("OPS-4471" in entry.text for entry in preview.context), [e.text[:200] for e in preview.context]
    assert not any(r.status.value == "failed" for r in await p.checkpoints.lineage(conv))


def test_the_command_line_on_the_cluster(prefix, redis_cluster_url) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "AI_", "THREADKEEPER_", "REDIS"))}
    env.update({"REDIS_URL": redis_cluster_url, "REDIS_CLUSTER": "true", "THREADKEEPER_KEY_PREFIX": prefix})
    cwd = tempfile.mkdtemp(prefix="threadkeeper-cluster-cli-")

    def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return prestarted.run(*args, input=stdin, env=env, cwd=cwd, timeout=240)

    import redis

    client = redis.RedisCluster.from_url(redis_cluster_url)
    url_port = int(redis_cluster_url.rsplit(":", 1)[1])
    # A conversation whose keys live on another node than the one REDIS_URL names: a plain client would be
    # answered MOVED there.
    conv = next(c for c in (f"console:c{i}" for i in range(100))
                if client.get_node_from_key(f"{prefix}:{{{c}}}:state").port != url_port)
    try:
        chat = cli("console", "--conversation", conv,
                   stdin="".join(f"note {i}: build {4000 + i} is green\n" for i in range(3)) + "/quit\n")
        assert chat.returncode == 0 and "Redis at REDIS_URL" in chat.stdout, chat.stderr
        history = cli("history", conv, "--json")
        assert history.returncode == 0, history.stderr
        assert [row["kind"] for row in json.loads(history.stdout)] == ["turn"] * 3
        context = cli("context", conv, "--json")
        assert context.returncode == 0 and "build 4002" in context.stdout, context.stderr
        compact = cli("compact", conv, "--dry-run", "--json")
        assert compact.returncode == 0, compact.stderr
        assert {"carried", "generation", "strategy"} <= set(json.loads(compact.stdout))
        listed = cli("conversations", "--json")
        assert listed.returncode == 0 and [row["id"] for row in json.loads(listed.stdout)] == [conv], listed.stderr
        wrong = subprocess.run([sys.executable, "-m", "threadkeeper", "history", "x"], capture_output=True, text=True,
                               env={**env, "REDIS_URL": ""}, cwd=cwd, timeout=60)
        assert wrong.returncode == 2 and "REDIS_CLUSTER=true needs REDIS_URL" in wrong.stderr
    finally:
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.delete(key)
        client.close()
