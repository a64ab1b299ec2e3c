"""Rate and concurrency limiters.

`_rate` asks a `RateLimitStore` per decision; `_concurrency` holds permits in process (`_permits`) or
as leases on a semaphore store (its `LeasedPermits`). What both share (the `Limiter` base, the key,
the rejection) is in `_rate`, which imports `_concurrency` only for type checking.
"""
