"""The pipeline of `docs/guide.md`, "Your first incremental pipeline": a shop's orders and
customers ingested from SQLite, enriched, aggregated and split, incrementally."""
