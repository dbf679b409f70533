"""gputop.export layer (see DESIGN.md)."""
