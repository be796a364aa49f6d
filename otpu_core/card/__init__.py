"""The card: its contract (`regs`: BAR0 map, DRAM interleave, XDMA engine facts), run-directory
state (`runstate`: locks, status file), and the simulated card (`simcard`, with `dram`, `engine`,
`periphstore` (peripheral state shared between processes) and the peripherals `litedram`, `i2c`,
`thermal`, `faults`). docs/card.md describes them."""
