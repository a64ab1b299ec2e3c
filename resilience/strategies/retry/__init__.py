"""Retry: Polly's retry strategy; `_core` decides the delays (pure), `_strategy` performs them."""
