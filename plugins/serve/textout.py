"""Generated tokens to the text a client sees: streamed pieces, stop strings, logprobs entries.

`TextOut.push(token, logprob)` returns the text that may be sent now. Text that could still be
the start of a stop string is held back until it cannot; when a stop string appears, the text
ends before it and `stopped` is set (the request is then cancelled, freeing its KV pages). End
tokens (the model's end-of-turn ids) add no text.
"""
from __future__ import annotations


class TextOut:
    def __init__(self, tokenizer, stops: list[str], stop_ids: tuple[int, ...]):
        self.tok, self.stops, self.stop_ids = tokenizer, stops, stop_ids
        self.stream = tokenizer.stream()
        self.hold = max((len(s) for s in stops), default=1) - 1
        self.text, self.sent, self.stopped = "", 0, False
        self.tokens: list[int] = []
        self.pending: list[tuple[int, tuple]] = []     # (token, logprob entry) not yet sent with text

    def push(self, token: int, logprob=None) -> str:
        if self.stopped:
            return ""
        self.tokens.append(token)
        if logprob is not None:
            self.pending.append((token, logprob))
        if token in self.stop_ids:
            return ""
        self.text += self.stream.push(token)
        if self.stops:
            start = max(0, self.sent - self.hold)
            hits = [i for i in (self.text.find(s, start) for s in self.stops) if i >= 0]
            if hits:
                self.text, self.stopped = self.text[:min(hits)], True
                return self._take(len(self.text))
            return self._take(len(self.text) - self.hold)
        return self._take(len(self.text))

    def flush(self) -> str:
        return self._take(len(self.text))

    def _take(self, upto: int) -> str:
        if upto <= self.sent:
            return ""
        out, self.sent = self.text[self.sent:upto], upto
        return out

    def take_logprobs(self) -> list[tuple[int, tuple]]:
        out, self.pending = self.pending, []
        return out

    def piece(self, token: int) -> str: return self.tok.decode([token], skip_special=False)
