"""The asyncpg layer. Functions take ``conn`` first, everything else keyword-only."""
