"""The ReAct loop (`run_turn`) and the events it yields; no I/O of its own."""
