"""otpu-selftest plugin."""
