"""Tests of `resilience.primitives` (lock and semaphore), on memory stores and on Redis."""
