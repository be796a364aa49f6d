"""The card: its register and DRAM contract (`regs`), run-directory state (`runstate`) and the simulated card."""
