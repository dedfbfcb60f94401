"""The console transport: a line-based local chat on the same pipeline the Slack bot uses."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

from threadkeeper.services import Conversation, ModelSetupError, Pipeline
from threadkeeper.services.memory import Source, sources_line

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

    async def draft(self, conversation: Conversation) -> ConsoleDraft | None:
        self.writing = ConsoleDraft(self.out) if self.out.isatty() else None
        return self.writing

    async def status(self, conversation: Conversation, text: str | None) -> None:
        if text and self.out.isatty():
            print(f"  … {text}", file=self.out, flush=True)

    async def recover(self, conversation: Conversation) -> bool:
        return True  # a console reply is printed at once: nothing is ever left owed

    async def reply(self, conversation: Conversation, text: str, *, kind: str, trace_id: str | None,
                    checkpoint_id: str | None = None, notice: str | None = None,
                    sources: Sequence[Source] = ()) -> None:
        """Printed at once: always delivered (None); a notice on a line of its own before it, and where the memory
        it cites was said after it."""
        if notice:
            print(f"  ({notice})", file=self.out, flush=True)
        await self._show(text)
        if sources:
            print(f"  ({sources_line(sources)})", file=self.out, flush=True)

    async def _show(self, text: str) -> None:
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


async def _read_line(read: Callable[[], str]) -> str:
    """One line from ``read``, waited for without holding up the process: the read runs in a daemon thread, so
    Ctrl-C (which cancels the console) ends the process at once instead of waiting for a line that never comes."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[str] = loop.create_future()

    def settle(line: str | None, error: BaseException | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(line or "")

    def work() -> None:
        try:
            line = read()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting coroutine
            loop.call_soon_threadsafe(settle, None, exc)
            return
        loop.call_soon_threadsafe(settle, line, None)

    threading.Thread(target=work, name="console-input", daemon=True).start()
    return await done


async def run_console(pipeline: Pipeline, conversation_id: str, stdin: TextIO, out: TextIO, *,
                      author: str = "you", banner: str = "") -> int:
    """Read lines until EOF or /quit; each line is a message, answered by one turn."""
    events = ConsoleEvents(out)
    if banner:
        print(banner, file=out, flush=True)
    print(HELP, file=out, flush=True)
    edited = _line_reader(stdin, out, f"{author}> ")
    saved = _terminal_modes(stdin) if edited is not None else None
    try:
        with _woken_by_signals(asyncio.get_running_loop()):
            return await _converse(pipeline, conversation_id, stdin, out, events, edited, author)
    finally:
        if saved is not None:  # line editing changes them while it waits for a line, also when Ctrl-C ends it
            import termios

            termios.tcsetattr(stdin.fileno(), termios.TCSADRAIN, saved)


@contextlib.contextmanager
def _woken_by_signals(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """While the console waits for a line, a signal wakes its event loop. The kernel may hand Ctrl-C to any thread
    of the process (the one reading the line, an idle executor's); Python runs the handler in the main thread, which
    sleeps in the loop's ``select`` with nothing else to wake it, and would sleep on. Each signal's number is also
    written to a socket the loop reads (``signal.set_wakeup_fd``), so the main thread wakes and the handler runs at
    once. Outside the main thread (where signals cannot be handled) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    reading, writing = socket.socketpair()
    reading.setblocking(False)
    writing.setblocking(False)
    try:
        previous = signal.set_wakeup_fd(writing.fileno(), warn_on_full_buffer=False)
    except ValueError:  # not the main interpreter
        reading.close()
        writing.close()
        yield
        return

    def drain() -> None:
        with contextlib.suppress(OSError):
            reading.recv(4096)

    loop.add_reader(reading.fileno(), drain)
    try:
        yield
    finally:
        loop.remove_reader(reading.fileno())
        signal.set_wakeup_fd(previous)
        reading.close()
        writing.close()


def _terminal_modes(stdin: TextIO) -> list[Any] | None:
    try:
        import termios

        return termios.tcgetattr(stdin.fileno())
    except (ImportError, OSError, ValueError):
        return None


async def _converse(pipeline: Pipeline, conversation_id: str, stdin: TextIO, out: TextIO, events: ConsoleEvents,
                    edited: Callable[[], str] | None, author: str) -> int:
    while True:
        if edited is None and stdin.isatty():
            print(f"{author}> ", end="", file=out, flush=True)
        line = await _read_line(edited or stdin.readline)
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
            if not await pipeline.exists(conversation_id):
                print("(no history yet: say something first)", file=out, flush=True)
            else:
                print(lineage_text(conversation_id, await pipeline.lineage(conversation_id),
                                   await pipeline.messages(conversation_id)), file=out,
                      flush=True)
        elif command == "/context":
            if not await pipeline.exists(conversation_id):
                print("(no history yet: say something first)", file=out, flush=True)
            else:
                print(context_text(await pipeline.context(conversation_id)), file=out, flush=True)
        elif command.startswith("/"):
            print(f"unknown command {text.strip()!r}; {HELP}", file=out, flush=True)
        else:
            await pipeline.submit(conversation_id, text, author=author)
            results = await pipeline.run(conversation_id, events)
            problem = next((r.problem for r in results if r.problem), None)
            if problem is not None:  # a setting the provider refuses for good: every next message would fail too
                raise ModelSetupError(problem)
