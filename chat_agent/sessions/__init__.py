"""Live conversations: turns started and stopped, frames numbered and fanned out, background jobs."""
