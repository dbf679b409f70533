"""gputop.sources layer (see DESIGN.md)."""
