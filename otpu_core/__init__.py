"""openTPU tools core: targets, ISA, golden model, card contract, transports and the plugin host."""
__version__ = "0.1.0"
