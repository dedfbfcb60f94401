"""Prometheus metrics of the bot."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from threadkeeper.services import TurnResult


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.turns = Counter("threadkeeper_turns_total", "Turns run, by outcome", ["status"], registry=self.registry)
        self.compactions = Counter("threadkeeper_compactions_total", "Compactions, by strategy", ["strategy"],
                                   registry=self.registry)
        self.tokens_before = Counter("threadkeeper_compaction_tokens_before_total",
                                     "History tokens before compaction", registry=self.registry)
        self.tokens_after = Counter("threadkeeper_compaction_tokens_after_total",
                                    "History tokens after compaction", registry=self.registry)
        self.latency = Histogram("threadkeeper_turn_seconds", "Wall time of a run of turns for one conversation",
                                 registry=self.registry, buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120))
        self.errors = Counter("threadkeeper_errors_total", "Failures, by where they happened", ["where"],
                              registry=self.registry)
        self.events = Counter("threadkeeper_slack_events_total", "Slack events received, by kind and outcome",
                              ["kind", "outcome"], registry=self.registry)
        self.model_seconds = Histogram("threadkeeper_model_seconds", "Model time of a turn, every call and retry",
                                       registry=self.registry, buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300))
        self.ack = Histogram("threadkeeper_ack_seconds", "From an event's listener starting to its acknowledgement",
                             ["kind"], registry=self.registry,
                             buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 3))
        self.model_tokens = Counter("threadkeeper_model_tokens_total", "Tokens the model reported, by direction",
                                    ["direction"], registry=self.registry)
        self.cost = Counter("threadkeeper_model_cost_usd_total",
                            "What model calls cost by litellm's price map (unpriced models add nothing)",
                            registry=self.registry)
        self.unpriced = Counter("threadkeeper_model_unpriced_calls_total",
                                "Model calls litellm's price map does not price", registry=self.registry)
        self.feedback = Counter("threadkeeper_feedback_total", "Feedback buttons pressed on replies", ["value"],
                                registry=self.registry)
        self.streamed = Counter("threadkeeper_replies_total", "Replies delivered, by how they reached Slack",
                                ["via"], registry=self.registry)
        self.recovered = Counter("threadkeeper_replies_recovered_total",
                                 "Replies a worker delivered for an earlier holder of the lease that committed the "
                                 "turn but never confirmed the post", registry=self.registry)
        self.dead_letters = Gauge("threadkeeper_dead_letters",
                                  "Inbox items set aside as unreadable, kept for an operator "
                                  "(threadkeeper dead-letters list|retry)", registry=self.registry)
        self.dead_letter_conversations = Gauge("threadkeeper_dead_letter_conversations",
                                               "Conversations holding dead letters", registry=self.registry)
        self.backfill = Histogram("threadkeeper_backfill_seconds", "Reading a thread's earlier messages on joining it",
                                  registry=self.registry, buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10))

    def observe(self, results: list[TurnResult], seconds: float) -> None:
        self.latency.observe(seconds)
        for r in results:
            self.turns.labels(r.status).inc()
            if r.model_calls:
                self.model_seconds.observe(r.model_seconds)
            if r.spend is not None:
                self.model_tokens.labels("input").inc(r.spend.input_tokens)
                self.model_tokens.labels("output").inc(r.spend.output_tokens)
                self.cost.inc(r.spend.cost_usd)
                self.unpriced.inc(r.spend.unpriced_calls)
            if r.status == "failed":
                self.errors.labels("turn").inc()
            report = r.compaction
            if report is not None:
                self.compactions.labels(report.strategy).inc()
                self.tokens_before.inc(report.tokens_before)
                self.tokens_after.inc(report.tokens_after)

    def render(self) -> bytes:
        return generate_latest(self.registry)
