"""Hedging: extra attempts when the first is slow or fails; `_core` decides, `_pool` runs sync attempts."""
