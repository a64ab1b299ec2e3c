"""Timeout: aborts the scope's signal at the deadline; sync cooperative, async by cancellation."""
