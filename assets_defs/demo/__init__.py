"""`make demo`: the reference project's whole story on embedded defaults.

`story.py` runs it (reset, seed, materialize with Dagster, traffic, materialize again),
`report.py` prints what happened, `__main__.py` is the command line
(`python -m assets_defs.demo`, `python -m assets_defs.demo traffic`).
"""
