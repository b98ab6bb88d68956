"""Cascade: an OpenAI-compatible proxy that manages an agent's context window."""

__version__ = "0.1.0"

DEFAULT_CONFIG = "config/agents.json"
"""The config file read when none is named and it exists in the working directory
(``proxy.settings``); here, since ``cascade-proxy --help`` names it without loading the
settings."""
