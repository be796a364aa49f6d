"""The line REPL: readline editing and history, slash commands, Ctrl-C that stops the answer only.

Commands: /reset (new conversation, the KV pages go back to the pool), /stats (the last turn and
the session), /system TEXT (a new system prompt; starts over), /help, /quit (or Ctrl-D). While
an answer streams, Ctrl-C sets the engine's stop request (on the card: the stop word the
generate loop reads every token), the partial answer stays in the conversation and the prompt
comes back; at the prompt, Ctrl-C clears the line.
"""
from __future__ import annotations

import signal
import sys
from pathlib import Path

from otpu_core.console import stderr
from otpu_core.errors import OtpuError

from .views import session_summary, stats_line, turn_stats

HELP = """/reset          start a new conversation
/stats          the last turn and the session so far
/system [TEXT]  set (or clear) the system prompt; starts a new conversation
/help           this list
/quit           leave (Ctrl-D too)
Ctrl-C stops an answer; the conversation keeps what was said."""
HISTORY = "chat_history"


class Interrupt:
    """While active, SIGINT sets a flag (the returned callable reads it) instead of raising."""

    def __init__(self):
        self.hit = False
        self._old = None

    def __call__(self) -> bool: return self.hit

    def __enter__(self) -> "Interrupt":
        self.hit = False
        try:
            self._old = signal.signal(signal.SIGINT, self._on)
        except ValueError:           # not the main thread: no handler, no interruption
            self._old = None
        return self

    def _on(self, *_):
        self.hit = True

    def __exit__(self, *exc) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


def _history_file() -> Path:
    from otpu_core.ol.cache import cache_dir
    return cache_dir().parent / HISTORY


def _setup_readline():
    try:
        import readline
    except ImportError:          # no line editing on this Python: plain input()
        return None
    path = _history_file()
    try:
        readline.read_history_file(path)
    except OSError:
        pass
    readline.set_history_length(1000)
    return readline, path


def run_repl(session) -> None:
    from otpu_core.console import print_error
    err = stderr()
    rl = _setup_readline()
    err.print(f"otpu-chat: {session.model.name} ({session.model.config.family}, {session.opts.fmt}) on "
              f"{session.device}, engine {session.opts.engine}. /help for commands, Ctrl-D to quit.",
              markup=False, highlight=False)
    out = sys.stdout
    try:
        while True:
            try:
                line = input("> ")
            except KeyboardInterrupt:
                out.write("\n")
                continue
            except EOFError:
                out.write("\n")
                break
            text = line.strip()
            if not text:
                continue
            if text.startswith("/"):
                cmd, _, arg = text.partition(" ")
                if cmd in ("/quit", "/exit"):
                    break
                if cmd == "/help":
                    err.print(HELP, markup=False, highlight=False)
                elif cmd == "/reset":
                    session.reset()
                    err.print("new conversation", style="dim")
                elif cmd == "/stats":
                    err.print(session_summary(session), markup=False, highlight=False)
                elif cmd == "/system":
                    session.set_system(arg.strip() or None)
                    err.print("system prompt " + ("set" if arg.strip() else "cleared") + "; new conversation",
                              style="dim")
                else:
                    err.print(f"unknown command {cmd}; /help lists them", style="dim", markup=False)
                continue
            try:
                with Interrupt() as stop:
                    ex = session.ask(text, lambda t: (out.write(t), out.flush()), stop)
            except OtpuError as e:
                out.write("\n")
                print_error(e, "otpu-chat")
                continue
            out.write("\n")
            out.flush()
            err.print(stats_line(turn_stats(ex, session)), style="dim", markup=False, highlight=False)
    finally:
        if rl is not None:
            readline, path = rl
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                readline.write_history_file(path)
            except OSError:
                pass
