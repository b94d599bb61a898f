"""`python -m offset_assets.cli`: the `offset-assets` command without its console script."""

from offset_assets.cli import run

run()
