"""A model's own chat template rendered with `jinja2` the way transformers' `apply_chat_template` does.

Same environment (sandboxed, immutable, `trim_blocks` and `lstrip_blocks`, the `loopcontrols`
extension), same globals (`raise_exception`, `strftime_now`), the same `tojson` filter (no
ASCII escaping, optional indent and separators), the special tokens as variables (`bos_token`,
`eos_token`, ...), and `{% generation %}` blocks accepted. Template errors (a syntax error, or
the template's own `raise_exception`) become a `ModelError` naming where the template came from.
"""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from .errors import ModelError


def _environment():
    import jinja2
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationBlocks(Extension):
        """`{% generation %}...{% endgeneration %}` (assistant-mask markers): rendered as their body."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.Scope(body, lineno=lineno)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationBlocks, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


class ChatTemplate:
    def __init__(self, source: str, special: dict[str, str] | None = None, where: str = "the chat template"):
        import jinja2
        self.source, self.special, self.where = source, dict(special or {}), where
        try:
            self._t = _environment().from_string(source)
        except jinja2.exceptions.TemplateSyntaxError as e:
            raise ModelError(f"{where}: chat template syntax error at line {e.lineno}: {e.message}") from None

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, **kwargs) -> str:
        import jinja2
        try:
            return self._t.render(messages=messages, tools=None, documents=None,
                                  add_generation_prompt=add_generation_prompt, **{**self.special, **kwargs})
        except jinja2.exceptions.TemplateError as e:
            raise ModelError(f"{self.where}: the chat template refused the conversation: {e}") from None
