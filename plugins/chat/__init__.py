"""otpu-chat: chat with an LLM running on an openTPU card (or on the references), and the model checks."""
