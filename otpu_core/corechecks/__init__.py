"""Checks that belong to no single tool: platform, registers, memory, ISA op checks, system."""
