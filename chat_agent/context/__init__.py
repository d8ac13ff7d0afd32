"""What the model reads: both histories, token counts, summaries, prompts and cache breakpoints."""
