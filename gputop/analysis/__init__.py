"""gputop.analysis layer (see DESIGN.md)."""
