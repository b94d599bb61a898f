"""`offset-assets offsets`, `reset`, `metrics` (issue 2 fills these in)."""
