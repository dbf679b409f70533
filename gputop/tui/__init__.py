"""gputop.tui layer (see DESIGN.md)."""
