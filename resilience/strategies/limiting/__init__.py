"""Rate and concurrency limiters.

`_rate` asks a `RateLimitStore` per decision; `_concurrency` holds permits in process (`_permits`) or
as leases on a semaphore store (`_leased_permits`).
"""
