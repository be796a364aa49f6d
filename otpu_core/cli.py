"""The `otpu` root command: mounts every plugin's sub-app and turns user errors into exit codes.

`run_app` is the one place a Typer app is run, for `otpu` and for each `otpu-<tool>` console
script, so every tool shares the exit-code contract of `errors.py` and no traceback reaches a
user.
"""
from __future__ import annotations

import os
import sys
import weakref

import typer
from rich.table import Table

from . import __version__, plugins
from .console import print_error, print_json, stdout
from .errors import EXIT_INTERNAL, EXIT_USAGE, OtpuError, UsageError

try:  # typer >= 0.16 vendors click; older releases use the click package
    from typer._click.exceptions import ClickException, NoArgsIsHelpError
except ImportError:  # pragma: no cover - depends on the installed typer
    from click.exceptions import ClickException, NoArgsIsHelpError


HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}
_COMMANDS: "weakref.WeakKeyDictionary[typer.Typer, object]" = weakref.WeakKeyDictionary()


def run_app(app: typer.Typer, prog_name: str, args: list[str] | None = None) -> int:
    """Run a Typer app; returns the exit code instead of raising. `--version` (alone) works on
    every tool, as the first argument."""
    argv = sys.argv[1:] if args is None else args
    if argv == ["--version"]:
        print(f"{prog_name} {__version__}")
        return 0
    command = _COMMANDS.get(app)
    if command is None:      # building the click tree costs ~0.2 s: once per app object
        app.info.context_settings = {**(app.info.context_settings or {}), **HELP_OPTIONS}
        command = _COMMANDS[app] = typer.main.get_command(app)
    try:
        rv = command.main(args=argv, prog_name=prog_name, standalone_mode=False)
    except typer.Exit as e:
        return e.exit_code
    except NoArgsIsHelpError as e:
        e.show()
        return EXIT_USAGE
    except ClickException as e:
        e.show()
        return e.exit_code if e.exit_code else EXIT_USAGE
    except typer.Abort:
        print_error("aborted", prog_name)
        return 130
    except OtpuError as e:
        print_error(e, prog_name)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (`otpu-smi -l 1 | head`): stop quietly, as other tools do
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except OSError as e:
        # A file the user named could not be read or written, or an output that fails on write
        # (/dev/full): commands check what they can up front, this keeps the rest from reaching
        # the user as a traceback.
        where = f"{e.filename}: " if e.filename is not None else ""
        print_error(UsageError(f"{where}{e.strerror or e}"), prog_name)
        return EXIT_USAGE
    except Exception as e:
        if os.environ.get("OTPU_DEBUG") == "1":
            raise
        print_error(OtpuError(f"internal error: {e}" if str(e) else "internal error",
                              hint="a bug in otpu, not in your input: run again with OTPU_DEBUG=1 for the "
                                   "traceback and report it"), prog_name)
        return EXIT_INTERNAL
    return rv if isinstance(rv, int) else 0


def tool_main(app: typer.Typer, prog_name: str) -> None:
    """Body of an `otpu-<tool>` console script."""
    sys.exit(run_app(app, prog_name))


def version_option(prog: str):
    """The `--version` option (prints `<prog> <version>`), for a tool whose root callback has options
    of its own (otpu-chat's is the chat itself); `add_version_option` for the others."""
    def show(value: bool) -> None:
        if value:
            print(f"{prog} {__version__}")
            raise typer.Exit(0)
    return typer.Option(False, "--version", callback=show, is_eager=True, help="Print the version and exit.")


def add_version_option(app: typer.Typer, prog: str) -> None:
    """Give a tool's Typer app (one with sub-commands) a `--version` that prints `<prog> <version>`."""
    @app.callback()
    def _root(version: bool = version_option(prog)) -> None:
        pass


def _plugins_cmd(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List loaded plugins, their versions and the hooks each implements (and any that failed)."""
    infos = plugins.get().infos
    if json_out:
        print_json([vars(i) for i in infos])
        return
    table = Table(title="otpu plugins")
    for col in ("plugin", "module", "version", "hooks", "status"):
        table.add_column(col)
    for i in infos:
        status = f"[red]failed: {i.error}[/]" if i.error else ("built-in" if i.builtin else "loaded")
        table.add_row(i.name, i.module, i.version, ", ".join(i.hooks), status)
    stdout().print(table)


def build_app() -> typer.Typer:
    app = typer.Typer(name="otpu", no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                      help="openTPU tools: bring up, calibrate, watch, debug and run models on openTPU cards.")

    add_version_option(app, "otpu")
    app.command("plugins")(_plugins_cmd)
    mgr = plugins.get()
    # One call per implementation so a plugin whose commands fail to mount takes only itself down.
    for impl in mgr.hook.otpu_commands.get_hookimpls():
        try:
            impl.function(app=app)
        except Exception as e:
            print(f"otpu: plugin '{impl.plugin_name}' could not add its commands: {type(e).__name__}: {e}", file=sys.stderr)
    return app


def main() -> None:
    sys.exit(run_app(build_app(), "otpu"))
