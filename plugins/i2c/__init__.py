"""otpu-i2c plugin: the card's I2C buses and host SMBus adapters, read-only: scan, read, sensors, PMBus."""
