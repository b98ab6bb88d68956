"""Cascade: an OpenAI-compatible proxy that manages an agent's context window."""

__version__ = "0.1.0"
