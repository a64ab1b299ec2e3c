"""The background runtime: what owns background work, and how that work stops (private)."""
