"""rlsched store: job history, ingest and the helper's audit log."""
