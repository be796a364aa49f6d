"""Built-in plugins: the core's own commands, registered through the same hooks as any tool."""
