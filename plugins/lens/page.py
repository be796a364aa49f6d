"""The lens page: one self-contained HTML file (CSS, JS and SVG inlined; no network, no CDN).

`app/lens.html` is the shell with placeholders; the style and the scripts in `app/` are inlined
in a fixed order. The page gets its data one of two ways:

- served (`otpu-lens open`): `window.LENS_URLS` lists `/profile/0`, `/profile/1`, ...; the page
  fetches each (gzip bytes) and inflates it with the browser's DecompressionStream;
- standalone (`otpu-lens html`): the documents are inside the page as a JSON data block
  (`<script type="application/json">`, parsed with JSON.parse), every `</` written `<\\/` so no
  string can close the element.

A user can also open any `.otpuprof` by drag and drop or the "Open profile" button.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

APP = Path(__file__).resolve().parent / "app"
SCRIPTS = ("util.js", "data.js", "overview.js", "roofline.js", "timeline.js", "floor.js", "tables.js",
           "compare.js", "main.js")


def _asset(name: str) -> str:
    return (APP / name).read_text()


def render(title: str, documents_json: list[str] | None = None, urls: list[str] | None = None) -> str:
    """The page; `documents_json`: JSON texts of profile documents to embed, or `urls` to fetch."""
    data = "null"
    if documents_json is not None:
        data = ("[" + ",".join(documents_json) + "]").replace("</", "<\\/")
    shell = _asset("lens.html")
    script = "\n".join(f"// ---- {name}\n{_asset(name)}" for name in SCRIPTS)
    boot = f"window.LENS_URLS = {json.dumps(urls)};\n"
    # the data block goes in by concatenation, so it is never scanned for placeholders
    head, tail = shell.split("/*__DATA__*/")
    head = head.replace("__TITLE__", html.escape(title)).replace("/*__STYLE__*/", _asset("lens.css"))
    tail = tail.replace("/*__BOOT__*/", boot).replace("/*__SCRIPT__*/", script.replace("</script", "<\\/script"))
    return head + data + tail
