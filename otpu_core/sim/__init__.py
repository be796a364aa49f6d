"""Pieces of the golden ISA simulator: memories, opcode-group semantics.

`otpu_core.isasim` is the public face (`Machine`, `Slice`, `SimError`); the modules here each
own one part of the machine: `memory` (DRAM, TMEM and ACT RAM with range checks and DRAM write
generations), `vector` (VOP, DSTEP, STREAM), `matrix` (MM, QACT, QST).
"""
