"""otpu-smi plugin."""
