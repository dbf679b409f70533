"""gputop: nvidia-smi + top for people who train models."""

__version__ = "0.1.0"
