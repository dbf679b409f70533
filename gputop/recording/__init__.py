"""Recordings: the SQLite schema, packing, the writer and the one reader."""
