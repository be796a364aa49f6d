"""otpu-lens: record a run, profile it, and look at it in the browser.

`record` runs a workload on the timing model (`--engine sim`) or a card (`--engine card`, the
default: the card at `--dev`, the simulated card when none is present) and writes a `.otpuprof`
file; `list` names the workloads; `info` and `diff` print profiles; `open` serves the page on
127.0.0.1; `html` writes it as one standalone file; `export --perfetto` writes Chrome trace JSON.
Exit codes: 0 ok, 2 usage or input error (a bad or newer profile file), 3 card busy or absent.
"""
from __future__ import annotations

import webbrowser
from pathlib import Path

import typer

from otpu_core import cliopts
from otpu_core.cli import add_version_option, tool_main
from otpu_core.console import print_json, stderr, stdout
from otpu_core.errors import UsageError
from otpu_core.outpath import check_writable, write_or_show
from otpu_core.target import load as load_target

from . import compare, fileformat, model_token, page, perfetto, recorder, render, serve, workloads

app = typer.Typer(name="lens", no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                  help="Record a run on the timing model or a card, profile it, and look at it in the browser.")

add_version_option(app, "otpu-lens")


def _say(level: str, text: str) -> None:
    con = stderr()
    prefix = {"warn": "warning: ", "bad": "error: "}.get(level, "")
    con.print(prefix + text, markup=False, style="yellow" if level == "warn" else "red" if level == "bad" else None)


@app.command("record")
def record_cmd(out: Path = typer.Option(..., "-o", "--output", help="Profile file to write (.otpuprof)."),
               workload: str = typer.Option(None, "--workload", "-w", help="What to run (`otpu-lens list`); "
                                            "default decoder-layer, or the model workload with --model."),
               engine: str = typer.Option("card", "--engine", help="card: the card at --dev (the simulated card "
                                          "when none is present); sim: the timing model in this process."),
               dev: cliopts.Dev = None, target: cliopts.TargetName = None,
               keep: str = typer.Option("first", "--keep", help="Card trace buffer: keep the first records "
                                        "(stop when full) or the last (ring)."),
               tokens: int = typer.Option(None, "--tokens", min=1, help="Tokens to decode (one profile each), or "
                                          "cached tokens for attention."),
               pos: int = typer.Option(None, "--pos", min=0, help="First position to decode."),
               model: str = typer.Option(None, "--model", help="Model directory, for a model workload."),
               prompt: str = typer.Option(None, "--prompt", help="Prompt text, for a model workload."),
               timeout: float = typer.Option(600.0, "--timeout", min=0.1, help="Card: seconds to wait for each run."),
               open_after: bool = typer.Option(False, "--open", help="Open the profile in the browser afterwards."),
               json_out: bool = typer.Option(False, "--json", help="Print a summary of each profile as JSON.")) -> None:
    """Run a workload, read its trace records and counters, and write a profile file."""
    if engine not in ("card", "sim"):
        raise UsageError(f"--engine {engine}: must be card or sim")
    if keep not in ("first", "last"):
        raise UsageError(f"--keep {keep}: must be first or last")
    if engine == "sim" and dev is not None:
        raise UsageError(f"--dev {dev}: --engine sim runs the timing model in this process; drop --dev or use "
                         "--engine card")
    cliopts.seconds(timeout, "--timeout")
    cliopts.nonempty(workload, "--workload", "a workload (`otpu-lens list`)")
    cliopts.nonempty(model, "--model", "a model")
    options = {"tokens": tokens, "pos": pos, "model": model, "prompt": prompt}
    w = workloads.get(workload if workload is not None else _default_workload(model))
    workloads.check_options(w, options)
    check_writable(out, "-o")
    eng = recorder.SimEngine(load_target(target)) if engine == "sim" else \
        recorder.CardEngine(dev, target, keep, timeout)
    try:
        profiles = recorder.record(w, workloads.Context(eng.target, options), eng, _say)
    finally:
        eng.close()
    write_or_show(out, fileformat.encode(profiles), "-o")
    if json_out:
        print_json({"file": str(out), "profiles": [render.summary(p) for p in profiles]})
    else:
        stdout().print(f"wrote {out} ({len(profiles)} profile{'s' if len(profiles) != 1 else ''})", markup=False)
    if open_after:
        _serve([out], 0, True)


def _default_workload(model: str | None) -> str:
    return "decoder-layer" if model is None else model_token.NAME


@app.command("list")
def list_cmd(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Name the workloads `record` can run."""
    items = sorted(workloads.REGISTRY.values(), key=lambda w: w.name)
    if json_out:
        print_json([{"name": w.name, "help": w.help, "options": list(w.takes)} for w in items])
        return
    stdout().print(render.workloads_table(items))


@app.command("info")
def info_cmd(files: list[Path] = typer.Argument(..., help="Profile files."),
             json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Summarise profile files: format, and per profile cycles, roofline, instructions, machine."""
    docs = [(f, fileformat.read(f)) for f in files]
    if json_out:
        print_json([{"file": str(f), "format": d["format"], "version": d["version"], "created": d.get("created"),
                     "profiles": [render.summary(p) for p in d["profiles"]]} for f, d in docs])
        return
    for f, d in docs:
        for line in render.info_lines(str(f), d):
            print(line)


def _pick(doc: dict, index: int, path: Path) -> dict:
    if not 0 <= index < len(doc["profiles"]):
        raise UsageError(f"{path}: profile {index} does not exist (the file has {len(doc['profiles'])})")
    return doc["profiles"][index]


@app.command("diff")
def diff_cmd(a: Path = typer.Argument(..., help="Profile A (e.g. from the timing model)."),
             b: Path = typer.Argument(..., help="Profile B (e.g. from a card)."),
             index_a: int = typer.Option(0, "--profile-a", min=0, help="Which profile of file A."),
             index_b: int = typer.Option(0, "--profile-b", min=0, help="Which profile of file B."),
             top: int = typer.Option(10, "--top", min=1, help="Source lines to show."),
             json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Per-instruction-class cycle deltas (B - A) and the source lines that moved most."""
    pa, pb = _pick(fileformat.read(a), index_a, a), _pick(fileformat.read(b), index_b, b)
    d = compare.diff(pa, pb, top)
    if json_out:
        print_json(d)
        return
    con = stdout()
    for t in render.diff_tables(d):
        con.print(t)


@app.command("open")
def open_cmd(files: list[Path] = typer.Argument(..., help="Profile files (two open side by side)."),
             port: int = typer.Option(0, "--port", min=0, max=65535, help="Port on 127.0.0.1 (0: any free one)."),
             no_browser: bool = typer.Option(False, "--no-browser", help="Only print the address.")) -> None:
    """Serve the page and the profiles on 127.0.0.1 and open the browser (Ctrl-C stops)."""
    for f in files:
        fileformat.read(f)               # refuse a bad file before serving anything
    _serve(files, port, not no_browser)


def _serve(files: list[Path], port: int, browser: bool) -> None:
    try:
        server = serve.serve(list(files), port, title=f"otpu-lens: {', '.join(f.name for f in files)}")
    except OSError as e:
        raise UsageError(f"--port {port}: cannot listen on 127.0.0.1:{port} ({e.strerror or e})") from None
    url = serve.url_of(server)
    stdout().print(f"otpu-lens at {url}  (Ctrl-C to stop)", markup=False)
    if browser:
        webbrowser.open(url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


@app.command("html")
def html_cmd(files: list[Path] = typer.Argument(..., help="Profile files."),
             out: Path = typer.Option(..., "-o", "--output", help="The page to write (.html).")) -> None:
    """Write one standalone page with the profiles inside (opens from disk, no server, no network)."""
    docs = [fileformat.read(f) for f in files]
    check_writable(out, "-o")
    texts = [fileformat.dumps_document(d) for d in docs]
    write_or_show(out, page.render(f"otpu-lens: {', '.join(f.name for f in files)}", documents_json=texts), "-o")
    stdout().print(f"wrote {out}", markup=False)


@app.command("export")
def export_cmd(file: Path = typer.Argument(..., help="Profile file."),
               perfetto_out: Path = typer.Option(..., "--perfetto", help="Chrome trace JSON to write "
                                                 "(ui.perfetto.dev, chrome://tracing)."),
               index: int = typer.Option(0, "--profile", min=0, help="Which profile of the file.")) -> None:
    """Write a profile as Chrome trace events: a track per unit, counters, names and source lines in args."""
    p = _pick(fileformat.read(file), index, file)
    check_writable(perfetto_out, "--perfetto")
    write_or_show(perfetto_out, perfetto.chrome_json(p), "--perfetto")
    stdout().print(f"wrote {perfetto_out}", markup=False)


def main() -> None:
    tool_main(app, "otpu-lens")
