"""Ingest sources: each is a pure iterator of ``db.records.Parsed`` items."""
