"""Example projects built on offset-assets; each is the code of a guide in `docs/`."""
