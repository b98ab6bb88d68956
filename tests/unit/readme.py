"""README.md as the tests that hold it to the code read it, and the key spelling they share."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "README.md").read_text(encoding="utf-8")
LINES = TEXT.splitlines()
README = " ".join(TEXT.split())
"""README with every run of whitespace one blank, so a phrase may wrap anywhere."""


def snake(camel: str) -> str:
    """A config file's camelCase key as the schema's field name."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()
