"""The pure core: functions over message lists. Never awaits, never does I/O.

Every stage takes messages (OpenAI message dicts, treated as immutable), a token counter,
a config and a budget, and returns a :class:`StageResult`: new messages, events, and
*intents* (``Spill`` …) describing the I/O the shell must perform.
"""
