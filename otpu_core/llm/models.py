"""Which models exist, and opening one: `--model NAME|PATH` resolved to a `Model`.

Names: the models shipped in the package (`otpu_core/llm/shipped/*.gguf`, by file stem; the
default is `qwen3-pydoc`), then any model converted before (the conversion cache remembers its
source). A path may be a GGUF file or a Hugging Face directory. `Model` bundles the checkpoint,
its config, tokenizer and chat template (loaded once, on first use).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .chat_template import ChatTemplate
from .checkpoint import Checkpoint, open_checkpoint
from .config import ModelConfig
from .errors import ModelError
from .tokenizer import Tokenizer
from .tokenizer import load as load_tokenizer

SHIPPED_DIR = Path(__file__).resolve().parent / "shipped"
DEFAULT_MODEL = "qwen3-pydoc"


def shipped() -> dict[str, Path]:
    return {p.stem: p for p in sorted(SHIPPED_DIR.glob("*.gguf"))} if SHIPPED_DIR.is_dir() else {}


def known() -> list[dict]:
    """Shipped and cached models: name, kind, path, and (cached) the formats converted."""
    from .convert import cached_entries
    out = [{"name": n, "kind": "shipped", "path": str(p), "formats": []} for n, p in shipped().items()]
    by_source: dict[str, dict] = {e["path"]: e for e in out}
    for e in cached_entries():
        row = by_source.get(e["source"])
        if row is None:
            row = by_source[e["source"]] = {"name": e["model"], "kind": "cached", "path": e["source"], "formats": []}
            out.append(row)
        row["formats"].append({"format": e["format"], "bytes": e["bytes"], "cache": e["path"]})
    return out


def resolve(spec: str | None) -> Path:
    """None is the default model; an empty name is an error, not the default."""
    if spec is not None and not spec.strip():
        raise ModelError(f"model {spec!r}: the name is empty",
                         hint="give a model name (otpu-chat models lists them), a GGUF file or a Hugging Face directory")
    spec = spec or DEFAULT_MODEL
    p = Path(spec).expanduser()
    if p.exists():
        return p
    ship = shipped()
    if spec in ship:
        return ship[spec]
    for row in known():
        if row["name"] == spec and Path(row["path"]).exists():
            return Path(row["path"])
    names = ", ".join(sorted({r["name"] for r in known()})) or "none"
    if spec == DEFAULT_MODEL:
        raise ModelError(f"--model {spec}: the shipped model is not installed ({SHIPPED_DIR / (spec + '.gguf')} is "
                         "missing)", hint="reinstall the package, or give --model PATH to a GGUF file or model directory")
    raise ModelError(f"--model {spec}: no such file, directory or known model", hint=f"known models: {names}")


@dataclass
class Model:
    path: Path
    ckpt: Checkpoint
    _tokenizer: Tokenizer | None = field(default=None, repr=False)
    _template: ChatTemplate | None = field(default=None, repr=False)

    @property
    def config(self) -> ModelConfig: return self.ckpt.config

    @property
    def name(self) -> str:
        return self.path.stem if self.path.suffix == ".gguf" else self.path.name

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.ckpt.tokenizer, str(self.path), self.config.bos_id)
        return self._tokenizer

    @property
    def template(self) -> ChatTemplate | None:
        if self._template is None and self.ckpt.chat_template:
            self._template = ChatTemplate(self.ckpt.chat_template, self.ckpt.special, f"{self.path} chat template")
        return self._template

    def render_chat(self, messages: list[dict]) -> str:
        """The conversation as the chat template renders it for the assistant's next turn (no thinking)."""
        return self.template.render(messages, add_generation_prompt=True, enable_thinking=False)

    def prompt_ids(self, text: str, raw: bool = False) -> list[int]:
        """The tokens a conversation's first message is fed as: through the chat template, unless
        `raw` or the model has none (then the text with the tokenizer's special tokens)."""
        if raw or self.template is None:
            return self.tokenizer.encode(text, add_special=True)
        return self.tokenizer.encode(self.render_chat([{"role": "user", "content": text}]))

    def stop_ids(self) -> tuple[int, ...]:
        """The end-of-turn tokens: the config's, plus the template's end marks the vocabulary knows."""
        ids = list(self.config.eos_ids)
        for tok in ("<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>"):
            i = self.tokenizer.token_id(tok)
            if i is not None and i not in ids and (tok != "<|endoftext|>" or not ids):
                ids.append(i)
        return tuple(ids)


def open_model(spec: str | None) -> Model:
    path = resolve(spec)
    return Model(path, open_checkpoint(path))
