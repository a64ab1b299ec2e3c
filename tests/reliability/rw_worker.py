"""A worker process of the shared-holds run (test_shared_processes.py): readers and writers on one key.

    python -m tests.reliability.rw_worker DSN TABLE KEY NAME ROLE ROUNDS TTL [REDIS_PORT]

The lock store is `PostgresLockStore(DSN, table=TABLE)`, or with REDIS_PORT a `RedisLockStore`
on that server (prefix TABLE); the resource and the log are in PostgreSQL either way.

ROLE is "mixed" (holds, shared or exclusive at random, until the test says stop), or a victim that takes one hold
and stays in it until the test kills or stops it: "stay-shared", "stay-exclusive", and
"stale-writer" (exclusive; after it is resumed it still writes, as a holder that does not look
at its signal would).

Each hold touches the fenced resource (`rw_resource`: a writer writes, a reader reads, each
with its token; the resource refuses a token older than what it already saw) and records its
section (`rw_log`): mode, token, the server's clock at entry and exit, whether the resource
accepted, and whether the lease was lost. Entry is also marked in `rw_inside` (by name) so the
test knows when a victim holds. The server's clock (`clock_timestamp()`) orders the sections of
all processes.
"""

from __future__ import annotations

import contextlib
import random
import sys
import time

import psycopg
import redis

from resilience.exceptions import LockLeaseLostError
from resilience.primitives import LockHandle, lock
from resilience.stores import PostgresLockStore, RedisLockStore

# The resource: `w` the highest writer token it accepted, `m` the highest token of any access.
# A write is accepted when its token is >= m, a read when its token is > w.
WRITE = """UPDATE rw_resource SET w = %(t)s, m = %(t)s WHERE key = %(k)s AND m <= %(t)s RETURNING 1"""
READ = """UPDATE rw_resource SET m = greatest(m, %(t)s) WHERE key = %(k)s AND w < %(t)s RETURNING 1"""
NOW = "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint"
LOG = """INSERT INTO rw_log (key, name, shared, token, started, ended, accepted, lost)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"""


def main() -> None:
    dsn, table, key, name, role, rounds, ttl = sys.argv[1:8]
    conn = psycopg.connect(dsn, autocommit=True)
    store: PostgresLockStore | RedisLockStore = (
        PostgresLockStore(dsn, table=table)
        if len(sys.argv) < 9
        else RedisLockStore(redis.Redis(port=int(sys.argv[8]), socket_timeout=5), prefix=table)
    )
    locks = lock(store, prefix="rw", ttl=float(ttl))
    rng = random.Random(name)

    def now() -> int:
        row = conn.execute(NOW).fetchone()
        assert row is not None
        return int(row[0])

    def section(shared: bool, stay: bool, handle: LockHandle) -> tuple[int, int, bool]:
        started = now()
        conn.execute("INSERT INTO rw_inside (key, name) VALUES (%s, %s)", (key, name))
        if stay:
            time.sleep(3600)  # killed, or stopped and resumed (a stopped sleep ends on time)
        else:
            time.sleep(rng.uniform(0.002, 0.02))
        accepted = conn.execute(READ if shared else WRITE, {"t": handle.token, "k": key}).fetchone() is not None
        time.sleep(rng.uniform(0.0, 0.005))
        return started, now(), accepted  # both inside the hold

    def hold(shared: bool, *, stay: bool = False) -> None:
        facts: list[tuple[int, int, bool]] = []
        token = 0
        lost = False

        def body(handle: LockHandle) -> None:
            nonlocal token
            token = handle.token
            facts.append(section(shared, stay, handle))

        try:
            locks.run(key, body, shared=shared, wait=60)
        except LockLeaseLostError:
            lost = True
        if facts:
            started, ended, accepted = facts[0]
            conn.execute(LOG, (key, name, shared, token, started, ended, accepted, lost))

    if role == "mixed":  # until the test says stop (a row in rw_stop), at most ROUNDS holds
        for _ in range(int(rounds)):
            if conn.execute("SELECT 1 FROM rw_stop WHERE key = %s", (key,)).fetchone() is not None:
                break
            hold(rng.random() < 0.6)
    elif role == "stale-writer":
        # Stopped past its ttl inside the hold, then resumed: it writes anyway (stale).
        def stale(handle: LockHandle) -> None:
            started = now()
            conn.execute("INSERT INTO rw_inside (key, name) VALUES (%s, %s)", (key, name))
            while not handle.signal.aborted:  # the test stops the process here, past the ttl
                time.sleep(0.01)
            accepted = conn.execute(WRITE, {"t": handle.token, "k": key}).fetchone() is not None
            conn.execute(LOG, (key, name, False, handle.token, started, now(), accepted, True))

        with contextlib.suppress(LockLeaseLostError):
            locks.run(key, stale, wait=60)
    else:
        hold(role == "stay-shared", stay=True)
    store.close()
    conn.close()


if __name__ == "__main__":
    main()
