"""`otpu-tt list`, `otpu-tt smi` and `otpu-tt sim reset`: the cards, their telemetry, a simulated card's power."""
from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import typer
from rich.text import Text

from otpu_core.console import print_json, stderr, stdout
from otpu_core.errors import EXIT_DEVICE, DeviceError, UsageError
from otpu_core.outpath import check_writable, write_or_show
from otpu_core.tt.card import Card, power_cycle_sim
from otpu_core.tt.kmd import present_minors
from otpu_core.tt.noc import LinkLost
from otpu_core.tt.probe import CoreState, probe_many
from otpu_core.tt.simdev import existing_sims

from . import snapshot, ttsmi, views
from .cliopts import dev_option, fault_option, json_option, live, loop_option, opened
from .recover import recover_command, remember_stuck


def all_specs() -> list[str]:
    """Every card: the /dev/tenstorrent nodes, and every simulated card in the run directory."""
    return [f"tt:{m}" for m in present_minors()] + [f"tt:sim:{n}" for n in existing_sims()]


def default_specs() -> list[str]:
    """What `smi` shows without --dev: every real card; without one, every simulated card (or tt:sim)."""
    real = [f"tt:{m}" for m in present_minors()]
    return real or [f"tt:sim:{n}" for n in existing_sims()] or ["tt:sim"]


def broken_state(card: Card) -> str:
    return "reset pending" if card.needs_post_reset else "link lost" if isinstance(card.broken, LinkLost) else "chip hung"


BROKEN_STATUS = {"reset pending": "needs POST_RESET", "link lost": "link lost", "chip hung": "NoC hung"}


def card_row(spec: str) -> dict:
    """One row of `list`: who the card is (remembered when it cannot be read now) and how it is."""
    row: dict = {"dev": spec, "health": "error"}
    try:
        with opened(spec, need_noc=False) as card:
            values = card.telemetry.read() if card.broken is None else card.memo.identity()
            b = snapshot.derive(values)["board_info"]
            row.update(node=card.dev.path, bus_id=card.info.bdf, board_type=b["board_type"], board_id=b["board_id"],
                       tensix_enabled=b["tensix_enabled"])
            if card.broken is not None:
                state = broken_state(card)
                row.update(health="broken", status=BROKEN_STATUS[state], remembered=bool(values),
                           detail=recover_command(card, [CoreState(card.tiles.arc, state)]))
                return row
            states = probe_many(card.noc, card.tiles.tensix, skip=card.memo.stuck())
            remember_stuck(card, states)
            bad = [s for s in states if not s.healthy]
            counts: dict[str, int] = {}
            for s in bad:
                counts[s.state] = counts.get(s.state, 0) + 1
            row["cores"] = {"healthy": len(states) - len(bad), **counts}
            if bad:
                where = ", ".join(f"{s.tile}" for s in bad[:4]) + (" ..." if len(bad) > 4 else "")
                what = ", ".join(f"{n} {k}" for k, n in counts.items())
                row.update(health="degraded", status="degraded",
                           detail=f"{what} ({where}); {recover_command(card, bad)}")
            else:
                row.update(health="ok", status="ok")
    except (DeviceError, UsageError) as e:
        row["status"] = e.message
    return row


def list_cmd(json_out: bool = json_option()) -> None:
    """List Blackhole cards: every /dev/tenstorrent node and every simulated card in the run directory,
    with bus, board, serial, Tensix count and health (ok, degraded with the cores that are bad, or
    what keeps the card from being read, with the bus and serial remembered from the last read)."""
    rows = [card_row(spec) for spec in all_specs()]
    if json_out:
        print_json(rows)
        return
    if not rows:
        stdout().print("no Blackhole cards (no /dev/tenstorrent nodes, no simulated cards yet; `otpu-tt smi --dev tt:sim` makes one)")
        return
    stdout().print(views.card_list(rows))


SMI_HELP = ("Card type, serial, firmware, ASIC id, AICLK, voltage, power, current, temperature, heartbeat, throttling, "
            "DRAM, PCIe link and processes, for every card (or --dev). -s prints a snapshot in tt-smi's -s JSON shape "
            "(to FILE if given); -f writes it to FILE, by default ~/tt_smi_logs/<mm-dd-YYYY_HH:MM:SS>_results.json "
            "as tt-smi -f does ('-' prints it). Exit 0, 3 when a card cannot be read.")


def smi_cmd(file: str = typer.Argument(None, metavar="[FILE]", help="With -s or -f: the file to write."),
            dev: str = dev_option(), fault: str = fault_option(), loop: float = loop_option(),
            json_out: bool = typer.Option(False, "--json", help="Print our JSON: tt-smi's sections with numbers."),
            tt_snapshot: bool = typer.Option(False, "-s", "--snapshot", help="A snapshot in tt-smi's -s JSON shape."),
            tt_log: bool = typer.Option(False, "-f", "--filename", help="Write the tt-smi snapshot to FILE "
                                        "(default ~/tt_smi_logs/<date>_results.json, '-' for stdout).")) -> None:
    if file is not None and not (tt_snapshot or tt_log):
        raise UsageError(f"'{file}': a FILE is only taken with -s or -f", hint="otpu-tt smi -s out.json")
    if (tt_snapshot or tt_log) and (loop or json_out):
        raise UsageError("-s/-f write one tt-smi snapshot; they do not combine with -l or --json")
    target = None
    if tt_snapshot or tt_log:
        target = file or ("-" if tt_snapshot else str(ttsmi.default_log_path()))
        if target != "-":
            path = Path(target)
            if file is None:
                path.parent.mkdir(parents=True, exist_ok=True)
            check_writable(path, "-f" if tt_log else "-s")
    specs = [dev] if dev is not None or fault else default_specs()
    with ExitStack() as stack:
        cards, unopened = [], []
        for spec in specs:
            try:
                cards.append(stack.enter_context(opened(spec, fault, need_noc=len(specs) == 1)))
            except DeviceError as e:
                if len(specs) == 1:
                    raise
                unopened.append({"dev": spec, "error": e.message, "hint": e.hint})
        if loop:
            live(lambda: views.smi(snapshot.snapshot(cards), unopened), loop)
            return
        if target is not None:
            snap, errors = ttsmi.snapshot(cards)
            errors = unopened + errors
            text = ttsmi.text(snap)
            if target == "-":
                stdout().out(text, highlight=False)
            else:
                write_or_show(Path(target), text + "\n", "-f" if tt_log else "-s")
                stderr().print(f"saved the tt-smi snapshot to {target}", markup=False)
            for e in errors:      # stdout holds JSON only: the cards left out are named on stderr
                stderr().print(Text.assemble(("error:", "bold red"), f" {e['dev']}: {e['error']}"), markup=False)
        else:
            snap = snapshot.snapshot(cards)
            errors = snap["errors"] = unopened + snap["errors"]
            if json_out:
                print_json(snap)
            else:
                stdout().print(views.smi(snap))
    if errors:
        raise typer.Exit(EXIT_DEVICE)


def sim_reset_cmd(dev: str = typer.Option("tt:sim", "--dev", "-d", help="A simulated card: tt:sim or tt:sim:NAME.")) -> None:
    """Power a simulated card off and on: L1, DRAM, registers, hangs (even a lost link), locks and the
    record of applied faults are cleared, so `--fault` specs apply again. Refused while a process has it open."""
    name = power_cycle_sim(dev)
    stdout().print(f"tt:sim:{name}: powered off and on (state and faults cleared)", markup=False)
