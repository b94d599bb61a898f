"""Order events from a Kafka topic, ingested range by range into a versioned table, and a
per-customer total computed from it incrementally (`definitions.py`, run by `run.py`)."""
