"""SimTransport: the Transport interface on a simulated card in the run directory.

All DMA rules come from the `Transport` base class, exactly as on the XDMA path; only the four
primitives differ: a register access goes to the card model (which applies the register
semantics), and each DMA call is one call of the card's XDMA engine model (which punishes the
rules the base class exists to keep). The device lock is taken like XdmaTransport's.
"""
from __future__ import annotations

from ..card import regs
from ..card.runstate import DeviceLock
from ..card.simcard import SimCard, card_name, open_card
from . import Transport


class SimTransport(Transport):
    kind = "sim"
    physical_timing = False         # link rate and core time come from the timing model

    def __init__(self, name: str | None = None, target: str | None = None, faults: str | None = None,
                 lock: bool = True, card: SimCard | None = None):
        self.devname = card.name if card is not None else card_name(name)
        self.lock = DeviceLock(self.devname) if lock else None
        if self.lock:
            self.lock.acquire()
        try:
            self.card = card or open_card(self.devname, target, faults)
        except BaseException:
            if self.lock:
                self.lock.release()
            raise
        self._own_card = card is None
        super().__init__(f"sim:{name}" if name else "sim", self.card.channel_bytes, self.card.dram.channels)

    def _reg_read(self, off: int) -> int: return self.card.reg_read(off)

    def _reg_write(self, off: int, value: int) -> None: self.card.reg_write(off, value)

    def _reg_batch(self, ops: list[tuple[int, int | None]]) -> list[int]: return self.card.reg_batch(ops)

    def _h2c(self, axi: int, buf: memoryview) -> None: self.card.h2c(axi, buf)

    def _c2h(self, axi: int, buf: memoryview) -> None: self.card.c2h(axi, buf)

    def link(self) -> dict: return self.card.link()

    def last_error(self) -> str: return self.card.last_error()

    def injected_faults(self) -> tuple[str, ...]: return tuple(str(f) for f in self.card.faults)

    def fault_note(self) -> str:
        if not self.card.faults:
            return ""
        return (f"{self.dev} has injected faults: {self.card.faults} "
                f"(they stay until `otpu sim reset --dev {self.dev}` clears them)")

    def card_target(self) -> str | None: return self.card.target.name

    def engine_health(self) -> tuple[str, ...]:
        """The simulated XDMA engine's hazards, as its model holds them (they stay until reset)."""
        st = self.card.dma_stats()
        clear = f"`otpu sim reset --dev {self.dev}` clears it"
        out = []
        if st["lapped"]:
            out.append(f"H2C engine lapped: every host write lands {regs.XDMA_LAP_BYTES // 1024} KiB past its address "
                       f"(a write over {regs.RUN_H2C} bytes while a program ran); {clear}")
        if st["slip"]:
            out.append(f"H2C engine slipped: every host write lands {st['slip']} bytes late (a host->card transfer "
                       f"overlapped a card->host one); {clear}")
        if st["wedged"]:
            out.append(f"H2C write path wedged (sub-beat writes to one beat): writes time out; {clear}")
        return tuple(out)

    def _close(self) -> None:
        if self._own_card:
            self.card.close()
        if self.lock:
            self.lock.release()
