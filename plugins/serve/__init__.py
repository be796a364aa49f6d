"""otpu-serve: an OpenAI-compatible HTTP server for a model on one or more openTPU cards."""
