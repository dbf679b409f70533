"""gputop.advice layer (see DESIGN.md)."""
