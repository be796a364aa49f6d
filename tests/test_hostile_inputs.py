"""Every command and sub-command, fed hostile input: no traceback, no exception class name, no
exit 1 for an input error, ever.

The commands are found, not listed: the tree of the root `otpu` app and of every console script
of the distribution (so commands other branches add are covered when they merge). Each
parameter gets hostile values derived from its type: numbers 0, -1, nan, inf, huge and text;
input paths missing, a directory, an empty file, a non-UTF-8 file and random bytes; output
paths a directory, a missing directory, '' and /dev/full; strings ''. Environment variables
(every `OTPU_*` row of the README's Environment table) get non-numeric text and, for
directories, a file. Per-command overrides give the neutral values a command needs to reach
its checks (a program to run, a cheap check section) and values of their own for list options.

The table runs in the slow job (about 350 cases); the check that it covers every command runs
in the default one. Every case must exit 0, 2 or 3 with no "Traceback", no "internal error" and no Python
exception class name in its output; numbers that are not finite or not numbers, empty strings
and unusable paths must exit 2 (exit 1 means "a check failed", never "your input is wrong").
"""
from __future__ import annotations

import importlib.metadata as md
import os
import re
import signal
from pathlib import Path

import numpy as np
import pytest
import typer

from otpu_core import cli as core_cli

README = Path(__file__).resolve().parent.parent / "README.md"
CARD = ["--dev", "sim:h", "-t", "sim-small"]
TIMEOUT_S = 60

# ---- what a command needs to get past its arguments, and values of its own ------------------

NEUTRAL = {   # required parameters: a value that works, so the hostile one is what is tested
    ("asm", "SOURCE"): "{prog_s}", ("disasm", "IMAGE"): "{prog_bin}", ("sim", "run", "PROGRAM"): "{prog_s}",
    ("sim", "trace", "PATH"): "{trace}", ("card", "run", "PROGRAM"): "{prog_s}", ("card", "reg", "NAME"): "SCRATCH",
    ("ol", "compile", "FILE"): "{kernel_py}", ("ol", "compile", "--kernel"): "scale",
    ("tt", "core", "probe", "XY"): "1,2",
    ("lens", "open", "FILES"): "{empty}",     # a profile "x" written by a record case would be served until killed
}
BASE = {      # arguments every case of a command starts from: a cheap run on the shared test card
    ("diag",): [*CARD, "--only", "regs"], ("selftest",): CARD, ("smi",): CARD,
    ("smi", "dmon"): [*CARD, "-c", "1", "-d", "0.05"], ("card", "info"): CARD, ("card", "regs"): CARD,
    ("card", "reg"): CARD, ("card", "run"): CARD, ("sim", "reset"): ["--dev", "sim:scratch", "-t", "sim-small"],
    ("sim", "run"): ["-t", "sim-small"], ("tt", "smi"): ["--dev", "tt:sim"], ("tt", "core", "status"): ["--dev", "tt:sim"],
    ("tt", "core", "probe"): ["--dev", "tt:sim"], ("tt", "core", "recover"): ["--dev", "tt:sim"],
    ("tt", "sim", "reset"): ["--dev", "tt:sim"],
    ("chat", "kld"): ["-n", "2", "--format", "int8"],
    ("chat",): ["-p", "x", "-n", "1", "--ctx", "16", "--dev", "sim:chat", "-t", "ypcb-00338"],  # the shipped model fits it
}
RUNS_ITSELF = {("chat",)}              # groups whose callback is the command (otpu-chat -p ...): their options too
OWN_VALUES = {   # list options and free-form strings with a syntax of their own
    "--arg": ["0=nan", "0=99999999999", "9=1", "0=-99999999999", "x", "0="],
    "--dram": ["{missing}@0", "{prog_bin}@-1", "{prog_bin}@nan", "{prog_bin}", "{dir}@0"],
    "--dump": ["dram:0:-1", "tmem:x:1", "dram:0:99999999999", "x", "dram:-64:64"],
    "VALUE": ["x", "-1", "99999999999", "nan"], "XY": ["x", "1", "-1,-1", "99999,1"],
}
ACCEPTS_EMPTY = {"--fault", "--system"}   # '' means "no faults", "no system prompt"
ACCEPTS_DIRECTORY = {"--root"}         # `otpu setup --root DIR` looks at a tree
FINDS = {("setup",)}                   # a check of this host: exit 1 is its finding "not ready", not an input error
SKIP = {(("smi", "dmon"), "-c", "huge"),   # a huge sample count is a long stream, not an error
        (("selftest",), "--fault", "''"),   # '' clears the faults: a whole healthy run, covered by diag's
        (("sim", "reset"), "--fault", "''")}
OUTPUTS = {"-o", "--output", "--json", "--trace", "--chrome", "--asm", "-f", "--filename", "--logits"}

NUMBER_VALUES = {"0": "0", "-1": "-1", "nan": "nan", "inf": "inf", "huge": "99999999999999999999", "text": "x1"}
IN_PATHS = {"missing": "{missing}", "directory": "{dir}", "empty": "{empty}", "non-utf8": "{latin1}",
            "random": "{random}"}
OUT_PATHS = {"directory": "{dir}", "no-parent": "{missing_dir}/out", "empty": "", "full-device": "/dev/full"}
MUST_BE_USAGE = {"nan", "inf", "text", "''", "directory", "no-parent", "missing", "full-device", "empty-out"}


def _walk(cmd, path):
    if hasattr(cmd, "commands"):
        yield path, cmd
        for name, sub in cmd.commands.items():
            yield from _walk(sub, path + (name,))
    else:
        yield path, cmd


def console_script_apps() -> list[tuple[str, typer.Typer]]:
    """Each console script's Typer app, caught as it hands it to run_app (not imported by name)."""
    dist = md.distribution("opentpu")
    found = []
    for ep in sorted((e for e in dist.entry_points if e.group == "console_scripts"), key=lambda e: e.name):
        seen = []
        real = core_cli.run_app
        core_cli.run_app = lambda app, prog, args=None: seen.append(app) or 0
        try:
            main = ep.load()
            module = __import__(main.__module__, fromlist=["x"])
            old = getattr(module, "run_app", None)
            if old is real:
                module.run_app = core_cli.run_app
            try:
                main()
            except SystemExit:
                pass
            finally:
                if old is real:
                    module.run_app = real
        finally:
            core_cli.run_app = real
        if seen:
            found.append((ep.name, seen[0]))
    return found


def _param_key(p) -> str:
    return p.opts[0] if p.param_type_name == "option" else p.name.upper()


def _kind(p) -> str:
    ann = p.type_descriptor.annotation
    name = getattr(ann, "__name__", str(ann))
    if getattr(p, "is_flag", False) or ann is bool:
        return "flag"
    if name in ("int", "float"):
        return "number"
    if name == "Path" or ann is Path:
        return "out" if set(p.opts or []) & OUTPUTS else "in"
    return "list" if name == "list" else "str"


def _hostile(path, p) -> list[tuple[str, str]]:
    key, kind = _param_key(p), _kind(p)
    if key in OWN_VALUES:
        return [(v, v) for v in OWN_VALUES[key]] + ([("''", "")] if kind != "number" else [])
    if kind == "number":
        return list(NUMBER_VALUES.items())
    if kind == "in":
        return list(IN_PATHS.items())
    if kind == "out":
        return [("empty-out" if k == "empty" else k, v) for k, v in OUT_PATHS.items()]
    if kind in ("str", "list"):
        return [("''", "")]
    return []


def cases():
    out = []
    seen_callbacks = set()
    trees = [("otpu", core_cli.build_app())] + console_script_apps()
    for prog, app in trees:
        root = typer.main.get_command(app)
        for tail in ([], ["--help"], ["--version"]) if hasattr(root, "commands") else (["--help"], ["--version"]):
            out.append(pytest.param(prog, tail, {}, None, id=f"{prog} {' '.join(tail)}".strip()))
        for path, cmd in _walk(root, ()):
            if not path and hasattr(cmd, "commands"):
                continue
            cb = getattr(cmd, "callback", None)
            ident = (getattr(cb, "__module__", ""), getattr(cb, "__qualname__", ""))
            if ident in seen_callbacks:
                continue          # the same command under another name (otpu diag is otpu-diag)
            seen_callbacks.add(ident)
            name = " ".join((prog, *path))
            out.append(pytest.param(prog, [*path, "--no-such-option"], {}, "usage", id=f"{name} --no-such-option"))
            if hasattr(cmd, "commands") and path not in RUNS_ITSELF:
                continue
            base = list(BASE.get(path, []))
            required = []
            for p in cmd.params:
                if p.required:
                    value = NEUTRAL.get((*path, _param_key(p)))
                    if value is None:
                        value = "1" if _kind(p) == "number" else "{empty}" if _kind(p) == "in" else "x"
                    required.append((p, value))
            for p in cmd.params:
                if p.name == "version":
                    continue          # its own case above
                for label, value in _hostile(path, p):
                    if (path, _param_key(p), label) in SKIP:
                        continue
                    if p.param_type_name == "argument":
                        args = [value if q is p else v for q, v in required if q.param_type_name == "argument"]
                        if p not in [q for q, _ in required]:
                            args.append(value)
                        opts = [x for q, v in required if q.param_type_name == "option" for x in (q.opts[0], v)]
                        argv = [*path, *args, *opts, *base]
                    else:
                        args = [v for q, v in required if q.param_type_name == "argument"]
                        opts = [x for q, v in required if q.param_type_name == "option" and q is not p
                                for x in (q.opts[0], v)]
                        argv = [*path, *args, *opts, *base, p.opts[0], value]
                    must = label in MUST_BE_USAGE and not (label == "''" and _param_key(p) in ACCEPTS_EMPTY) \
                        and not (label == "directory" and _param_key(p) in ACCEPTS_DIRECTORY)
                    if label in ("non-utf8", "random", "empty") or label == "missing" and _kind(p) == "out":
                        must = False     # a binary input may be valid; an empty one may be refused or not
                    out.append(pytest.param(prog, argv, {}, "usage" if must else None,
                                            id=f"{name} {_param_key(p)}={label}"))
    for var in env_vars():
        for label, value in (("text", "x1!"), ("file", "{empty}")):
            if label == "file" and var not in ("OTPU_RUN_DIR", "OTPU_CACHE"):
                continue
            for argv in ENV_COMMANDS:
                out.append(pytest.param("otpu", list(argv), {var: value}, None, id=f"{var}={label} otpu {' '.join(argv)}"))
    return out


ENV_COMMANDS = (["card", "reg", "SCRATCH", "1"], ["sim", "run", "{prog_s}"], ["smi"],
                ["ol", "compile", "{kernel_py}", "-k", "scale"], ["tt", "list"])


def env_vars() -> list[str]:
    """Every OTPU_* variable of the README's Environment table."""
    rows = [ln for ln in README.read_text().splitlines() if ln.startswith("| `OTPU_")]
    return sorted({v for ln in rows for v in re.findall(r"`(OTPU_[A-Z0-9_]+)", ln.split("|")[1])})


# ---- the files the cases use, once per worker ------------------------------------------------

KERNEL = '''
from otpu_core import ol

def scale(x, y):
    ol.store(y, ol.load(x) * 2.0)

def scale_args(target):
    return dict(x=ol.Tensor(128, (4, 64)), y=ol.Tensor(4096, (4, 64)))
'''


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    from otpu_core import asm, isa
    d = tmp_path_factory.mktemp("hostile")
    (d / "prog.s").write_text("halt\n")
    (d / "prog.bin").write_bytes(isa.encode_program(asm.parse("halt\n").instrs))
    (d / "trace.bin").write_bytes(np.zeros(4, "<u8").tobytes())
    (d / "kernel.py").write_text(KERNEL)
    (d / "empty.s").write_bytes(b"")
    (d / "latin1.s").write_bytes(b"halt \xff\xfe\x80 caf\xe9\n")
    (d / "random.bin").write_bytes(np.random.default_rng(7).integers(0, 256, 1000, dtype=np.uint8).tobytes())
    (d / "adir.s").mkdir()
    (d / "run").mkdir()
    (d / "cache").mkdir()
    return d


def fill(argv, d: Path) -> list[str]:
    names = {"prog_s": d / "prog.s", "prog_bin": d / "prog.bin", "trace": d / "trace.bin", "kernel_py": d / "kernel.py",
             "missing": d / "absent.s", "missing_dir": d / "no-such-dir", "dir": d / "adir.s", "empty": d / "empty.s",
             "latin1": d / "latin1.s", "random": d / "random.bin"}
    return [a.format(**{k: str(v) for k, v in names.items()}) for a in argv]


class CaseTimeout(BaseException):
    """Raised by the alarm: a command that does not return is a finding of its own."""


CLASS_NAME = re.compile(r"\b(ValueError|TypeError|KeyError|IndexError|AttributeError|OSError|FileNotFoundError|"
                        r"IsADirectoryError|NotADirectoryError|PermissionError|UnicodeDecodeError|OverflowError|"
                        r"ZeroDivisionError|RuntimeError|AssertionError|RecursionError|MemoryError|"
                        r"JSONDecodeError|struct\.error|NameError)\b")


@pytest.mark.slow
@pytest.mark.parametrize("prog,argv,env,expect", cases())
def test_hostile_input(prog, argv, env, expect, workdir, monkeypatch, capsys):
    monkeypatch.setenv("OTPU_RUN_DIR", str(workdir / "run"))      # one shared card per worker: opened once
    monkeypatch.setenv("OTPU_CACHE", str(workdir / "cache"))
    monkeypatch.setenv("OTPU_DEV", "sim:h")
    monkeypatch.setenv("OTPU_TARGET", "sim-small")
    monkeypatch.chdir(workdir)
    for k, v in env.items():
        monkeypatch.setenv(k, fill([v], workdir)[0])
    args = fill(argv, workdir)
    apps = dict(console_script_apps_cached())

    def alarm(signum, frame):
        raise CaseTimeout(f"{prog} {' '.join(args)} did not return within {TIMEOUT_S} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(TIMEOUT_S)
    try:
        rc = core_cli.run_app(apps[prog], prog, args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    out, err = capsys.readouterr()
    text = out + err
    where = f"{prog} {' '.join(args)} (env {env}) -> {rc}\n{text[-2000:]}"
    assert "Traceback" not in text and "internal error" not in text, where
    assert not CLASS_NAME.search(text), where
    finds = any(tuple(args[:len(path)]) == path for path in FINDS) and prog == "otpu"
    assert rc in ((0, 1, 2, 3) if finds else (0, 2, 3)), where
    if expect == "usage":
        assert rc == 2, where


_SCRIPTS: list | None = None


def console_script_apps_cached():
    """The root app and every console script's, built once per worker (run_app keeps each one's
    command tree), so a case costs what its command does."""
    global _SCRIPTS
    if _SCRIPTS is None:
        _SCRIPTS = [("otpu", core_cli.build_app())] + console_script_apps()
    return _SCRIPTS


def test_the_table_covers_every_command_and_script():
    ids = [p.id for p in cases()]
    root = typer.main.get_command(core_cli.build_app())
    leaves = [" ".join(("otpu", *path)) for path, cmd in _walk(root, ()) if path and not hasattr(cmd, "commands")]
    for leaf in leaves:
        assert any(i.startswith(leaf + " ") for i in ids), leaf
    scripts = {e.name for e in md.distribution("opentpu").entry_points if e.group == "console_scripts"}
    assert {i.split()[0] for i in ids if " " in i or i in scripts} >= scripts
    assert len(env_vars()) >= 8 and "OTPU_LOCK_WAIT" in env_vars()
