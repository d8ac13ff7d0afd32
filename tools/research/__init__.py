"""The deep_research pipeline: plan, search, read, write, cite."""
