"""`otpu-chat --tui`: a full-screen Textual app over the same Session (conversation, live tok/s, card use).

Layout: a welcome box (model, engine, device), the conversation (your prompts after ">", the
answers as Markdown, streamed), a status line (TTFT, host and card tok/s, Mcycles per token,
DRAM GB/s and unit utilisation from the card's counters, a context meter) and the input line.
Enter sends, Esc stops the answer (what was generated stays in the conversation and the KV
cache), Ctrl-C or Ctrl-D quits; /reset, /stats, /system TEXT, /help, /quit as in the REPL. The
answer runs on a worker thread; tokens reach the screen through `call_from_thread`.
"""
from __future__ import annotations

import threading
import time

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Input, Markdown, Static

from otpu_core.errors import OtpuError

from .repl import HELP
from .views import session_summary, turn_stats

ACCENT = "#D97757"
METER = 8


def status_text(session, st: dict | None, live: str | None = None) -> str:
    """The status line: model and engine, then the last turn's numbers (or the live ones)."""
    parts = [f"{session.model.name} · {session.opts.engine} on {session.device}"]
    if live:
        parts.append(live)
    elif st is not None:
        if st["ttft_s"] is not None:
            parts.append(f"TTFT {st['ttft_s']:.2f}s")
        if st["host_tok_s"]:
            parts.append(f"host {st['host_tok_s']:.1f} tok/s")
        c = st.get("card")
        if c and c["decode_tok_s"]:
            card = f"card {c['decode_tok_s']:.1f} tok/s"
            if c["mcycles_per_token"]:
                card += f" · {c['mcycles_per_token']:.2f} Mcyc/tok"
            if c["dram_gbs"] is not None:
                card += f" · DRAM {c['dram_gbs']:.1f} GB/s"
            if c["util"]:
                card += " · " + " ".join(f"{k} {100 * v:.0f}%" for k, v in c["util"].items())
            parts.append(card)
    used = len(session.seq.tokens)
    cap = min(session.opts.ctx, session.model.config.context)
    filled = min(METER, round(METER * used / cap)) if cap else 0
    parts.append(f"ctx {used}/{cap} " + "▰" * filled + "▱" * (METER - filled))
    return " │ ".join(parts)


class ChatApp(App):
    CSS = f"""
    #welcome {{ border: round {ACCENT}; padding: 0 1; margin: 0 0 1 0; }}
    #log {{ height: 1fr; }}
    .prompt {{ color: $text-muted; margin: 1 0 0 0; }}
    .answer {{ margin: 0 0 0 2; }}
    .note {{ color: $text-muted; }}
    #status {{ height: 1; background: $boost; color: $text-muted; }}
    """
    BINDINGS = [Binding("escape", "interrupt", "stop the answer"), Binding("ctrl+c", "quit", "quit", priority=True),
                Binding("ctrl+d", "quit", "quit")]

    def __init__(self, session):
        super().__init__()
        self.session = session
        self.busy = False
        self.stop_event = threading.Event()
        self.last_stats: dict | None = None
        self._answer: Markdown | None = None
        self._text = ""
        self._t0 = 0.0
        self._n = 0

    def compose(self) -> ComposeResult:
        s = self.session
        yield Static(f"[b {ACCENT}]✻ openTPU chat[/]\n{s.model.name} ({s.model.config.family}, {s.opts.fmt}) · "
                     f"engine {s.opts.engine} · {s.device}\n/help for commands · esc to interrupt", id="welcome")
        yield VerticalScroll(id="log")
        yield Static(status_text(s, None), id="status")
        yield Input(placeholder="Ask anything  (/ for commands)", id="input")

    def on_mount(self) -> None:
        self.query_one("#input", Input).focus()

    # -- input --------------------------------------------------------------------------------------------
    def _note(self, text: str) -> None:
        log = self.query_one("#log", VerticalScroll)
        log.mount(Static(text, classes="note", markup=False))
        log.scroll_end(animate=False)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        event.input.value = ""
        if not text or self.busy:
            return
        if text.startswith("/"):
            self._command(text)
            return
        log = self.query_one("#log", VerticalScroll)
        log.mount(Static(f"> {text}", classes="prompt", markup=False))
        self._answer = Markdown("", classes="answer")
        log.mount(self._answer)
        log.scroll_end(animate=False)
        self._text, self._n, self._t0 = "", 0, time.monotonic()
        self.busy = True
        self.stop_event.clear()
        self._ask(text)

    def _command(self, text: str) -> None:
        cmd, _, arg = text.partition(" ")
        if cmd in ("/quit", "/exit"):
            self.exit()
        elif cmd == "/help":
            self._note(HELP)
        elif cmd == "/reset":
            self.session.reset()
            self._note("new conversation")
        elif cmd == "/stats":
            self._note(session_summary(self.session))
        elif cmd == "/system":
            self.session.set_system(arg.strip() or None)
            self._note("system prompt " + ("set" if arg.strip() else "cleared") + "; new conversation")
        else:
            self._note(f"unknown command {cmd}; /help lists them")
        self._status()

    # -- the answer, on a worker thread -------------------------------------------------------------------
    @work(thread=True, exclusive=True)
    def _ask(self, text: str) -> None:
        try:
            ex = self.session.ask(text, lambda piece: self.call_from_thread(self._piece, piece), self.stop_event.is_set)
            self.call_from_thread(self._done, ex, None)
        except OtpuError as e:
            self.call_from_thread(self._done, None, e)

    def _piece(self, piece: str) -> None:
        self._text += piece
        self._n += 1
        if self._answer is not None:
            self._answer.update(self._text)
        dt = time.monotonic() - self._t0
        live = f"decoding… {self._n} tok · {self._n / dt:.1f} tok/s" if dt > 0 else "decoding…"
        self._status(live)
        self.query_one("#log", VerticalScroll).scroll_end(animate=False)

    def _done(self, ex, err) -> None:
        self.busy = False
        if err is not None:
            self._note(f"error: {err.message}" + (f"\nhint: {err.hint}" if err.hint else ""))
        else:
            if self._answer is not None:
                self._answer.update(ex.text)
            self.last_stats = turn_stats(ex, self.session)
            if ex.turn.end == "stopped":
                self._note("(interrupted)")
        self._status()

    def _status(self, live: str | None = None) -> None:
        self.query_one("#status", Static).update(status_text(self.session, self.last_stats, live))

    def action_interrupt(self) -> None:
        if self.busy:
            self.stop_event.set()
            self._status("stopping…")

    def action_quit(self) -> None:
        self.stop_event.set()
        self.exit()


def run_tui(opts, progress) -> None:
    from .session import Session
    session = Session.open(opts, progress)
    progress.stop()
    try:
        ChatApp(session).run()
    finally:
        session.close()
