"""The background runtime's shared pieces (private): how an owner of background work stops it.

The timer thread and the pools still live beside their users (`_timers`, `_lease/_workers`).
"""
