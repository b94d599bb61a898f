"""The reference project's assets: ingestion from the source system, then transformations."""
