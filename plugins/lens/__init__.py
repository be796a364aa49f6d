"""otpu-lens: record a run on the timing model or a card, profile it, and look at it in the browser."""
