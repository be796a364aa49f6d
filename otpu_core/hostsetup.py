"""What a host needs before it can use a real openTPU card, checked item by item, each with its fix.

`check(root)` looks, under `root` (the real `/` or a fake tree in tests), at: the card on the
PCI bus (vendor 10ee device 7028, class 12 00 00 processing accelerator, subsystem 10ee:4f54;
an older bitstream enumerates as class 07 00 01), its link (Gen1 x8 is the design), the xdma
driver (module loaded, bound to the card), the device nodes it creates (`/dev/xdmaN_user`,
`_h2c_0`, `_c2h_0`), whether this user may open them, and the udev rules that grant that
(`60-otpu.rules`; `59-otpu-xdma.rules` binds the driver). Nothing is changed: every finding
carries the command that fixes it. `UDEV_RULES` is the rules file `otpu setup --udev-rules` prints.
"""
from __future__ import annotations

import os
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path

VENDOR, DEVICE, SUBSYSTEM = 0x10EE, 0x7028, (0x10EE, 0x4F54)
CLASS_ACCEL, CLASS_OLD = 0x120000, 0x070001
GEN1_GTS, WIDTH = 2.5, 8
NODES = ("user", "h2c_0", "c2h_0")
RULES = ("60-otpu.rules", "59-otpu-xdma.rules")
RULE_DIRS = ("etc/udev/rules.d", "lib/udev/rules.d", "usr/lib/udev/rules.d")
UDEV_RULES = f"""\
# openTPU: bind the xdma driver to the card and let the plugdev group use its DMA nodes
ACTION=="add", SUBSYSTEM=="pci", ATTR{{vendor}}=="0x{VENDOR:04x}", ATTR{{device}}=="0x{DEVICE:04x}", \\
  ATTR{{subsystem_device}}=="0x{SUBSYSTEM[1]:04x}", ATTR{{driver_override}}="xdma"
KERNEL=="xdma[0-9]*_user", MODE="0660", GROUP="plugdev"
KERNEL=="xdma[0-9]*_h2c_[0-9]*", MODE="0660", GROUP="plugdev"
KERNEL=="xdma[0-9]*_c2h_[0-9]*", MODE="0660", GROUP="plugdev"
KERNEL=="xdma[0-9]*_events_[0-9]*", MODE="0660", GROUP="plugdev"
"""
INSTALL_RULES = ("otpu setup --udev-rules | sudo tee /etc/udev/rules.d/60-otpu.rules && "
                 "sudo udevadm control --reload && sudo udevadm trigger")


@dataclass
class Item:
    """One finding: what was checked, PASS / WARN / FAIL, what was seen, and the fix."""
    name: str
    status: str
    found: str
    fix: str = ""


@dataclass
class Report:
    items: list[Item] = field(default_factory=list)
    cards: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool: return not any(i.status == "FAIL" for i in self.items)

    def add(self, name: str, status: str, found: str, fix: str = "") -> None:
        self.items.append(Item(name, status, found, fix))

    def as_dict(self) -> dict:
        return {"ok": self.ok, "cards": self.cards, "items": [asdict(i) for i in self.items]}


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _hex(text: str | None) -> int | None:
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None


def pci_cards(root: Path) -> list[dict]:
    """Every Xilinx 10ee:7028 function on the PCI bus, with what sysfs says about it."""
    out = []
    devices = root / "sys/bus/pci/devices"
    for d in sorted(devices.iterdir()) if devices.is_dir() else ():
        if _hex(_read(d / "vendor")) != VENDOR or _hex(_read(d / "device")) != DEVICE:
            continue
        driver = os.path.basename(os.readlink(d / "driver")) if (d / "driver").is_symlink() else None
        width = _read(d / "current_link_width")
        out.append({"bdf": d.name, "class": _hex(_read(d / "class")),
                    "subsystem": (_hex(_read(d / "subsystem_vendor")), _hex(_read(d / "subsystem_device"))),
                    "speed": _read(d / "current_link_speed"), "width": int(width) if width and width.isdigit() else None,
                    "driver": driver, "nodes": sorted(p.name for p in (d / "xdma").iterdir()) if (d / "xdma").is_dir() else []})
    return out


def usable(path: Path, uid: int | None = None, gids: set[int] | None = None) -> bool:
    """Whether this user (or `uid` with groups `gids`) may read and write `path`, from its mode
    bits (root may always)."""
    uid = os.geteuid() if uid is None else uid
    if uid == 0:
        return True
    gids = set(os.getgroups()) | {os.getegid()} if gids is None else gids
    st = path.stat()
    if st.st_uid == uid:
        need = stat.S_IRUSR | stat.S_IWUSR
    elif st.st_gid in gids:
        need = stat.S_IRGRP | stat.S_IWGRP
    else:
        need = stat.S_IROTH | stat.S_IWOTH
    return st.st_mode & need == need


def _gts(speed: str | None) -> float:
    try:
        return float((speed or "0").split()[0])
    except ValueError:
        return 0.0


def check(root: Path = Path("/"), uid: int | None = None, gids: set[int] | None = None) -> Report:
    r = Report()
    cards = pci_cards(root)
    r.cards = cards
    rescan = "echo 1 | sudo tee /sys/bus/pci/rescan (or reboot after programming the FPGA)"
    if not cards:
        r.add("PCIe device", "FAIL", f"no Xilinx {VENDOR:04x}:{DEVICE:04x} on the PCI bus",
              "load the openTPU bitstream, then rescan the bus: " + rescan + "; `lspci -d 10ee:` lists what is there")
    for c in cards:
        what = f"{c['bdf']} {VENDOR:04x}:{DEVICE:04x} class {c['class'] or 0:06x}"
        if c["class"] == CLASS_OLD:
            r.add(f"PCIe device {c['bdf']}", "WARN", what + " (an older bitstream: serial class, subsystem 10ee:0007)",
                  "load a current openTPU bitstream (class 12 00 00, subsystem 10ee:4f54)")
        else:
            r.add(f"PCIe device {c['bdf']}", "PASS", what)
        gts, width = _gts(c["speed"]), c["width"] or 0
        link = f"{c['speed'] or 'speed unknown'} x{width}"
        if gts < GEN1_GTS or width < WIDTH:
            r.add(f"PCIe link {c['bdf']}", "FAIL", link + f", below Gen1 x{WIDTH}",
                  "reseat the card in an x8 (or wider) slot; `sudo lspci -vv -s " + c["bdf"] + "` shows LnkSta")
        else:
            r.add(f"PCIe link {c['bdf']}", "PASS", link)
    loaded = (root / "sys/module/xdma").is_dir() or any(
        ln.split()[:1] == ["xdma"] for ln in (_read(root / "proc/modules") or "").splitlines())
    r.add("xdma driver", "PASS" if loaded else "FAIL", "module loaded" if loaded else "the xdma module is not loaded",
          "" if loaded else "install Xilinx dma_ip_drivers' XDMA driver and `sudo modprobe xdma`")
    for c in cards:
        if c["driver"] == "xdma":
            r.add(f"driver bound {c['bdf']}", "PASS", "bound to xdma")
        else:
            r.add(f"driver bound {c['bdf']}", "FAIL", f"bound to {c['driver'] or 'no driver'}",
                  f"echo xdma | sudo tee /sys/bus/pci/devices/{c['bdf']}/driver_override && echo {c['bdf']} | "
                  "sudo tee /sys/bus/pci/drivers_probe (59-otpu-xdma.rules does it at boot)")
    dev = root / "dev"
    users = sorted(dev.glob("xdma*_user")) if dev.is_dir() else []
    if not users:
        r.add("device nodes", "FAIL", "no /dev/xdma*_user",
              "the driver made no nodes: check `sudo dmesg | grep -i xdma` (a card the driver did not take)")
    for user in users:
        prefix = str(user)[:-len("_user")]
        name = "/dev/" + Path(prefix).name
        missing = [f"{name}_{n}" for n in NODES if not Path(f"{prefix}_{n}").exists()]
        r.add(f"device nodes {name}", "FAIL" if missing else "PASS",
              ("missing " + ", ".join(missing)) if missing else ", ".join(f"{name}_{n}" for n in NODES),
              "reload the driver (sudo modprobe -r xdma && sudo modprobe xdma)" if missing else "")
        denied = [f"{name}_{n}" for n in NODES if Path(f"{prefix}_{n}").exists() and not usable(Path(f"{prefix}_{n}"), uid, gids)]
        r.add(f"permissions {name}", "FAIL" if denied else "PASS",
              ("this user may not read and write " + ", ".join(denied)) if denied else "read and write",
              (f"{INSTALL_RULES}; then add yourself to the group: sudo usermod -aG plugdev $USER (log in again)")
              if denied else "")
    found = [d for d in RULE_DIRS if (root / d / RULES[0]).is_file()]
    r.add("udev rules", "PASS" if found else "WARN",
          f"{RULES[0]} in /{found[0]}" if found else f"no {RULES[0]} (nodes are root-only after a reboot)",
          "" if found else INSTALL_RULES)
    return r
