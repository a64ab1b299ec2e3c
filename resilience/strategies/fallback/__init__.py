"""Fallback: a substitute value or call when the outcome is handled."""
