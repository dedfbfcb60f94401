"""The console transport: a line-based local chat on the same pipeline the Slack bot uses."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import TextIO

from threadkeeper.services import Pipeline

from .render import context_text, lineage_text

HELP = "commands: /history (checkpoint lineage), /context (what the model sees next), /help, /quit"


class ConsoleDraft:
    """A reply printed as the model writes it (on a terminal)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.shown = ""

    async def write(self, text: str) -> None:
        if not self.shown:
            text = text.lstrip()
            if not text:
                return
            print("threadkeeper> ", end="", file=self.out)
        self.shown += text
        print(text, end="", file=self.out, flush=True)

    async def discard(self) -> None:
        if self.shown:
            print("\n  … (not the answer: the model goes on)", file=self.out, flush=True)
        self.shown = ""


class ConsoleEvents:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.writing: ConsoleDraft | None = None

    async def draft(self, conversation_id: str) -> ConsoleDraft | None:
        self.writing = ConsoleDraft(self.out) if self.out.isatty() else None
        return self.writing

    async def status(self, conversation_id: str, text: str | None) -> None:
        if text and self.out.isatty():
            print(f"  … {text}", file=self.out, flush=True)

    async def reply(self, conversation_id: str, text: str, *, kind: str, trace_id: str | None,
                    checkpoint_id: str | None = None) -> None:
        writing, self.writing = self.writing, None
        if writing is not None and writing.shown and text == writing.shown.strip():
            print(file=self.out, flush=True)  # already on screen as it was written
            return
        if writing is not None:
            await writing.discard()
        print(f"threadkeeper> {text}", file=self.out, flush=True)


def _line_reader(stdin: TextIO, out: TextIO, prompt: str) -> Callable[[], str] | None:
    """On a terminal, lines are read with line editing and history (arrow keys, Ctrl-R; GNU readline where
    Python has it), prompt included; otherwise ``None``: plain lines, so piped input works as it is."""
    if not (stdin is sys.stdin and out is sys.stdout and stdin.isatty()):
        return None
    try:
        import readline  # noqa: F401 - importing it gives input() line editing and history
    except ImportError:
        pass

    def read() -> str:
        try:
            return input(prompt) + "\n"
        except EOFError:
            return ""

    return read


async def run_console(pipeline: Pipeline, conversation_id: str, stdin: TextIO, out: TextIO, *,
                      author: str = "you", banner: str = "") -> int:
    """Read lines until EOF or /quit; each line is a message, answered by one turn."""
    events = ConsoleEvents(out)
    if banner:
        print(banner, file=out, flush=True)
    print(HELP, file=out, flush=True)
    edited = _line_reader(stdin, out, f"{author}> ")
    while True:
        if edited is None and stdin.isatty():
            print(f"{author}> ", end="", file=out, flush=True)
        line = await asyncio.to_thread(edited or stdin.readline)
        if not line:
            return 0
        text = line.rstrip("\n")
        if not text.strip():
            continue
        command = text.strip().lower()
        if command in ("/quit", "/exit"):
            return 0
        if command == "/help":
            print(HELP, file=out, flush=True)
        elif command == "/history":
            if not await pipeline.checkpoints.conversation_exists(conversation_id):
                print("(no history yet: say something first)", file=out, flush=True)
            else:
                print(lineage_text(conversation_id, await pipeline.checkpoints.lineage(conversation_id)), file=out,
                      flush=True)
        elif command == "/context":
            if not await pipeline.checkpoints.conversation_exists(conversation_id):
                print("(no history yet: say something first)", file=out, flush=True)
            else:
                print(context_text(await pipeline.context(conversation_id)), file=out, flush=True)
        elif command.startswith("/"):
            print(f"unknown command {text.strip()!r}; {HELP}", file=out, flush=True)
        else:
            await pipeline.submit(conversation_id, text, author=author)
            await pipeline.run(conversation_id, events)
