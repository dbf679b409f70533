"""Frozen records every layer shares: the model, printable text, formatting, the debug log."""
