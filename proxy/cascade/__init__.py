"""The pure core: functions over message lists. Never awaits, never does I/O.

Every stage is a pure function ``run(messages, step) -> StageResult``: the messages it passes
on, its events, and ``Marks`` saying what the shell must persist (evicted and trimmed
messages, injected blocks). ``pipeline.assemble`` runs the ordered tuple ``STAGES``; a stage
that needs I/O says what in a pure plan (``step.py``). docs/architecture.md shows how to add one.
"""
