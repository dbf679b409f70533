"""Textual widgets; each renders Lines built by gputop.tui.views."""
