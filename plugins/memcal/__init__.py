"""otpu-memcal plugin: DDR3 calibration of the LiteDRAM controllers, from the host and through the core's CPU."""
