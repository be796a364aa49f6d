"""otpu-diag plugin."""
