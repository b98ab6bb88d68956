"""Thin HTTP layer: parse, call a service, map the result to a response."""
