"""Log lines for people and for log pipelines: ``key=value`` (default) or JSON, one line per record.

Every record goes through structlog's formatter, Threadkeeper's own and its libraries' (Bolt, litellm, redis)
alike, with its time, level and logger; the fields a record carries (``extra``, such as the conversation
id and trace id of the per-turn and per-compaction lines of :mod:`services.tracing`) become keys of
their own.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import IO, Any, Literal

FORMATS = ("text", "json")


def configure(level: str = "INFO", fmt: Literal["text", "json"] = "text", stream: IO[str] | None = None) -> None:
    """Send every log record to ``stream`` (default stderr) as one ``key=value`` or JSON line. structlog is imported
    here, not with this module: with rich, which it imports too, it costs a process 6 MB, and a command may load what
    it needs first (:func:`threadkeeper.cli.main`)."""
    import structlog

    renderer = structlog.processors.JSONRenderer() if fmt == "json" else \
        structlog.processors.LogfmtRenderer(key_order=["timestamp", "level", "logger", "event"], drop_missing=True)
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_log_level, structlog.stdlib.add_logger_name,
                           structlog.processors.TimeStamper(fmt="iso", utc=True), structlog.stdlib.ExtraAdder()],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, renderer])
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def quiet_turn_lines(level: str) -> None:
    """For commands that report turns themselves (console, replay, eval): the one line per turn and per
    compaction is logged only at DEBUG."""
    if level != "DEBUG":
        for name in ("threadkeeper.turn", "threadkeeper.compaction"):
            logging.getLogger(name).setLevel(logging.WARNING)


def stderr_console() -> Any:
    """A rich console on stderr, for progress bars that must not mix with a command's output. Lines it prints are
    never cut to the terminal's width (a path stays one word to copy)."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


PLAIN_EVERY_SECONDS = 10.0
"""How often long work says where it stands when its progress goes to a file or a pipe."""


class WorkProgress:
    """Where long work stands, for a person watching: on a terminal a bar with the count, the time taken and the
    time left; written to a file or a pipe, a plain line at most every ``PLAIN_EVERY_SECONDS`` and one at the end.
    ``total`` None: phases without a count (each named as it starts, with the time taken so far)."""

    def __init__(self, label: str, total: int | None, *, stream: IO[str] | None = None) -> None:
        self.label, self.total, self.stream = label, total, stream or sys.stderr
        self.done, self.what = 0, ""
        self._clock = time.monotonic
        self.started = self._last = self._clock()
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> WorkProgress:
        if self.stream.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                       TextColumn("left"), TimeRemainingColumn()] if self.total is not None else \
                [SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn()]
            self._bar = Progress(*columns, console=Console(file=self.stream, soft_wrap=True), transient=True)
            self._bar.__enter__()
            self._task = self._bar.add_task(self.label, total=self.total)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
        elif exc[0] is None:
            self._say(final=True)

    def update(self, done: int | None = None, *, what: str | None = None, advance: int = 0) -> None:
        """``done`` of the total are done (or ``advance`` more); ``what``: what is being done now."""
        self.done = done if done is not None else self.done + advance
        if what is not None:
            self.what = what
        if self._bar is not None:
            description = f"{self.label}: {self.what}" if self.what else self.label
            self._bar.update(self._task, completed=self.done, description=description)
        elif (now := self._clock()) - self._last >= PLAIN_EVERY_SECONDS or (what is not None and self.total is None):
            self._say(now)

    def _say(self, now: float | None = None, *, final: bool = False) -> None:
        self._last = now = self._clock() if now is None else now
        taken = now - self.started
        if self.total is None:
            line = f"{self.label}: {'done' if final else self.what} ({taken:.0f} s)"
        else:
            share = self.done / self.total if self.total else 1.0
            left = f", about {taken / share - taken:.0f} s left" if 0 < share < 1 else ""
            line = f"{self.label}: {self.done:,} of {self.total:,} ({share:.0%}), {taken:.0f} s{left}"
        print(line, file=self.stream, flush=True)
