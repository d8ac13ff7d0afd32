"""The bubblewrap sandbox that code_interpreter runs model-written code in."""
