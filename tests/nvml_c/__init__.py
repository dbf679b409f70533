"""The C NVML for tests: its source, and the helpers that build and run it."""
