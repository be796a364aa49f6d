"""Tenstorrent Blackhole p150a from user space: the transport for `otpu-tt`.

Layers, each a module with one job (imports point down):

- `consts`: facts of the chip (grid, address map, telemetry tags, ARC messages, reset bits);
- `ioctl`: the tt-kmd ioctl ABI, packed exactly as the driver lays out its structs;
- `device`: the `BlackholeDevice` interface (ioctls, TLB windows, BAR registers) and its errors;
- `kmd`: the real device over `/dev/tenstorrent/N`;
- `faults`, `simchip`, `simdev`: the simulated p150a (state in a run directory) behind the same
  interface, so no tool ever asks whether a card is simulated;
- `coords`: tiles and their coordinates, only from ARC telemetry and the harvesting mask;
- `noc`: NoC reads and writes through aimed 2 MiB windows, with the guards;
- `arc`: telemetry table and message queue;
- `layout`, `launch`, `queue`: our L1 layout, the launch protocol, resident dispatch;
- `probe`: the safe liveness probe of a Tensix; `card`: opening a `--dev` spec, locking,
  resetting and finding the card again.
"""
