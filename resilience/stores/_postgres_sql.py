"""The SQL of the PostgreSQL stores: each statement exists once, here (docs/postgres.md shows it).

Rules every statement keeps (docs/postgres.md explains why):

- Only the database's clock is read (`clock_timestamp()`, which moves within a transaction,
  unlike `now()`); the client's clock never enters a decision.
- Every call is one statement, so it is atomic in autocommit mode and costs one round trip.
- Tokens come from one logged sequence with `CACHE 1` and are drawn only while the key's row is
  locked (the lock store's `ON CONFLICT DO UPDATE` arm; the semaphore's advisory lock), so a
  later grant of a key always gets a larger token than an earlier one.

Lock table `<table>`: one row per key that was ever taken (`owner` NULL once released: the row
keeps the last token as a tombstone, so the next grant goes through the locked arm). Rows whose
lease ended more than `PURGE_AFTER_S` seconds ago are purged now and then.

Semaphore table `<table>`: one row per holder (`key`, `owner`), deleted on release; the
acquire function takes a transaction-scoped advisory lock per key before it counts holders.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from resilience.exceptions import ValidationError
from resilience.stores._redis_scripts import QUEUE_BOUND

__all__ = ["PURGE_AFTER_S", "TOKEN_MAX", "LockSql", "SemaphoreSql", "check_table"]

TOKEN_MAX = 2**53 - 1
"""The sequence's MAXVALUE: tokens stay exact as JSON and JavaScript numbers."""
PURGE_AFTER_S = 60
"""How long (s) a released or expired row is kept before a purge may delete it."""

_NAME = re.compile(r"[a-z_][a-z0-9_]{0,47}(\.[a-z_][a-z0-9_]{0,47})?")


def check_table(owner: str, table: object) -> str:
    """`table` when it is a lower-case SQL name, optionally schema-qualified; else ValidationError.

    Only such names are accepted, so they can be written into SQL unquoted and the names
    derived from them (`<table>_token`, ...) stay valid identifiers.
    """
    if not isinstance(table, str) or _NAME.fullmatch(table) is None:
        msg = (
            f"{owner}: table must be a lower-case SQL name such as 'resilience_locks' or"
            f" 'myschema.locks' (letters, digits, underscores), got {table!r}"
        )
        raise ValidationError(msg)
    return table


def _sequence(table: str) -> str:
    return f"""CREATE SEQUENCE IF NOT EXISTS {table}_token
    AS bigint MINVALUE 1 MAXVALUE {TOKEN_MAX} CACHE 1 NO CYCLE;
-- CACHE 1: a session that pre-allocated values would hand out older tokens after newer ones.
ALTER SEQUENCE {table}_token CACHE 1;"""


def _lock_id(table: str) -> str:
    # The advisory-lock class of this table's DDL and (for the semaphore) its keys.
    return f"hashtext('{table}')"


@dataclass(frozen=True)
class _TableSql:
    """What the statements of a lock table and of a semaphore table share."""

    table: str

    @property
    def channel(self) -> str:
        """The NOTIFY channel of releases (the payload is md5 of the key)."""
        return self.table

    @property
    def renew(self) -> str:
        """(ttl ms, key, owner): one row updated when `owner` holds the live lease (or slot)."""
        return f"""UPDATE {self.table} SET expires_at = clock_timestamp() + %s * interval '1 millisecond'
WHERE key = %s AND owner = %s AND expires_at > clock_timestamp()"""

    @property
    def holders(self) -> str:
        """(key,): the live holders of one key, by token: owner, token, ms left."""
        return f"""SELECT owner, token, ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint
FROM {self.table} WHERE key = %s AND owner IS NOT NULL AND expires_at > clock_timestamp() ORDER BY token"""

    @property
    def held_keys(self) -> str:
        """(): every key with a live holder, in order (for `python -m resilience locks list`)."""
        return f"""SELECT DISTINCT key FROM {self.table}
WHERE owner IS NOT NULL AND expires_at > clock_timestamp() ORDER BY key"""

    @property
    def purge(self) -> str:
        """Delete the rows whose lease ended long ago (bounded table size for unbounded keys)."""
        return f"DELETE FROM {self.table} WHERE expires_at < clock_timestamp() - interval '{PURGE_AFTER_S} seconds'"


@dataclass(frozen=True)
class LockSql(_TableSql):
    """The statements of one lock table."""

    @property
    def schema(self) -> str:
        """The DDL: idempotent, run in one transaction under an advisory lock."""
        t = self.table
        return f"""SELECT pg_advisory_xact_lock({_lock_id(t)}, 0);
{_sequence(t)}
CREATE TABLE IF NOT EXISTS {t} (
    key        text PRIMARY KEY,
    owner      text,                 -- NULL once released: the row keeps the last token
    token      bigint NOT NULL,
    expires_at timestamptz NOT NULL  -- on the database's clock
);"""

    @property
    def acquire(self) -> str:
        """(key, owner, ttl ms) -> one row: (token, NULL) when granted, (NULL, ms left) when held.

        No row when the holder committed after this statement's snapshot (time left unknown).
        """
        t = self.table
        return f"""WITH acquired AS (
    INSERT INTO {t} AS l (key, owner, token, expires_at)
    VALUES (%(key)s, %(owner)s, nextval('{t}_token'), clock_timestamp() + %(ttl)s * interval '1 millisecond')
    ON CONFLICT (key) DO UPDATE SET
        token = CASE WHEN l.owner = excluded.owner AND l.expires_at > clock_timestamp()
                     THEN l.token ELSE nextval('{t}_token') END,
        owner = excluded.owner,
        expires_at = clock_timestamp() + %(ttl)s * interval '1 millisecond'
    WHERE l.owner IS NULL OR l.owner = excluded.owner OR l.expires_at <= clock_timestamp()
    RETURNING l.token
)
SELECT token, NULL::bigint FROM acquired
UNION ALL
SELECT NULL, greatest(1, ceil(extract(epoch FROM h.expires_at - clock_timestamp()) * 1000))::bigint
FROM {t} h WHERE h.key = %(key)s AND NOT EXISTS (SELECT FROM acquired)"""

    @property
    def release(self) -> str:
        """(key, owner): one row updated (and a NOTIFY sent at commit) when `owner` held it."""
        return f"""UPDATE {self.table} SET owner = NULL, expires_at = clock_timestamp()
WHERE key = %s AND owner = %s AND expires_at > clock_timestamp()
RETURNING pg_notify('{self.channel}', md5(key))"""

    @property
    def held(self) -> str:
        """(key,): one row when someone holds the live lease."""
        return f"SELECT 1 FROM {self.table} WHERE key = %s AND owner IS NOT NULL AND expires_at > clock_timestamp()"

    @property
    def force_release(self) -> str:
        """(key,): the live lease freed whoever holds it (and a NOTIFY sent at commit)."""
        return f"""UPDATE {self.table} SET owner = NULL, expires_at = clock_timestamp()
WHERE key = %s AND owner IS NOT NULL AND expires_at > clock_timestamp()
RETURNING pg_notify('{self.channel}', md5(key))"""


@dataclass(frozen=True)
class SemaphoreSql(_TableSql):
    """The statements of one semaphore table (and of its waiters' queue, `<table>_queue`)."""

    @property
    def queue(self) -> str:
        """The queue table: one row per waiting owner, in arrival order."""
        return f"{self.table}_queue"

    @property
    def schema(self) -> str:
        """The DDL and the acquire function: idempotent, one transaction under an advisory lock."""
        t = self.table
        q = self.queue
        return f"""SELECT pg_advisory_xact_lock({_lock_id(t)}, 0);
{_sequence(t)}
CREATE TABLE IF NOT EXISTS {t} (
    key        text NOT NULL,
    owner      text NOT NULL,
    token      bigint NOT NULL,
    expires_at timestamptz NOT NULL,  -- on the database's clock
    PRIMARY KEY (key, owner)
);
ALTER TABLE {t} ADD COLUMN IF NOT EXISTS permits integer NOT NULL DEFAULT 1;
-- The waiters, first come first served; an entry not refreshed by its waiter expires.
CREATE TABLE IF NOT EXISTS {q} (
    key        text NOT NULL,
    owner      text NOT NULL,
    permits    integer NOT NULL,
    arrival    bigint GENERATED ALWAYS AS IDENTITY,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (key, owner)
);
DROP FUNCTION IF EXISTS {t}_acquire(text, text, bigint, integer);
-- A token (> 0) for the holder of p_permits slots; -(ms until the first holder's lease ends)
-- when too few are free; 0 when enough are free but promised to waiters ahead. A refused
-- caller with p_entry_ms > 0 joins the queue (or refreshes its entry).
CREATE OR REPLACE FUNCTION {t}_acquire(
    p_key text, p_owner text, p_ttl_ms bigint, p_limit integer, p_permits integer, p_entry_ms integer
) RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    v_now     timestamptz;
    v_token   bigint;
    v_held    bigint;
    v_ahead   bigint;
    v_arrival bigint;
    v_first   timestamptz;
BEGIN
    -- One acquirer per key at a time (until commit): the count and the token are exact.
    PERFORM pg_advisory_xact_lock({_lock_id(t)}, hashtext(p_key));
    v_now := clock_timestamp();
    DELETE FROM {t} WHERE key = p_key AND expires_at <= v_now;
    UPDATE {t} SET expires_at = v_now + p_ttl_ms * interval '1 millisecond'
        WHERE key = p_key AND owner = p_owner RETURNING token INTO v_token;
    IF FOUND THEN
        RETURN v_token;
    END IF;
    DELETE FROM {q} WHERE key = p_key AND expires_at <= v_now;
    SELECT coalesce(sum(permits), 0), min(expires_at) INTO v_held, v_first FROM {t} WHERE key = p_key;
    SELECT arrival INTO v_arrival FROM {q} WHERE key = p_key AND owner = p_owner;
    -- What the waiters ahead ask for (all of them for a caller outside the queue).
    SELECT coalesce(sum(permits), 0) INTO v_ahead FROM {q}
        WHERE key = p_key AND (v_arrival IS NULL OR arrival < v_arrival);
    IF v_held + v_ahead + p_permits > p_limit THEN
        IF p_entry_ms > 0 AND (v_arrival IS NOT NULL
                               OR (SELECT count(*) FROM {q} WHERE key = p_key) < {QUEUE_BOUND}) THEN
            INSERT INTO {q} AS w (key, owner, permits, expires_at)
                VALUES (p_key, p_owner, p_permits, v_now + p_entry_ms * interval '1 millisecond')
                ON CONFLICT (key, owner) DO UPDATE SET expires_at = excluded.expires_at;
        END IF;
        IF v_held + p_permits <= p_limit OR v_first IS NULL THEN
            RETURN 0;
        END IF;
        RETURN -greatest(1, ceil(extract(epoch FROM v_first - v_now) * 1000))::bigint;
    END IF;
    IF v_arrival IS NOT NULL THEN
        DELETE FROM {q} WHERE key = p_key AND owner = p_owner;
    END IF;
    v_token := nextval('{t}_token');
    INSERT INTO {t} (key, owner, token, expires_at, permits)
        VALUES (p_key, p_owner, v_token, v_now + p_ttl_ms * interval '1 millisecond', p_permits);
    RETURN v_token;
END
$fn$;"""

    @property
    def acquire(self) -> str:
        """(key, owner, ttl ms, limit, permits, queue entry ms or 0) -> the function's answer."""
        return f"SELECT {self.table}_acquire(%s, %s, %s, %s, %s, %s)"

    @property
    def release(self) -> str:
        """(key, owner, key, owner) -> (1 when `owner` held live slots, now freed, else 0).

        A waiter that holds nothing leaves the queue instead. Either way a NOTIFY is sent at
        commit, so the waiters check whether their slots are now free.
        """
        t = self.table
        return f"""WITH released AS (
    DELETE FROM {t} WHERE key = %s AND owner = %s AND expires_at > clock_timestamp() RETURNING key
), gone AS (
    DELETE FROM {self.queue} WHERE key = %s AND owner = %s RETURNING key
), told AS (
    SELECT pg_notify('{self.channel}', md5(key)) FROM released
    UNION ALL SELECT pg_notify('{self.channel}', md5(key)) FROM gone
)
SELECT (SELECT count(*) FROM released), (SELECT count(*) FROM told)"""

    @property
    def turn(self) -> str:
        """(key, owner, key, key, owner, permits, limit) -> whether `owner` may take its slots now."""
        t, q = self.table, self.queue
        return f"""SELECT EXISTS (SELECT FROM {t} WHERE key = %s AND owner = %s AND expires_at > clock_timestamp())
    OR (SELECT coalesce(sum(permits), 0) FROM {t} WHERE key = %s AND expires_at > clock_timestamp())
     + (SELECT coalesce(sum(w.permits), 0) FROM {q} w WHERE w.key = %s AND w.expires_at > clock_timestamp()
        AND w.arrival < coalesce((SELECT arrival FROM {q} WHERE key = w.key AND owner = %s), 9223372036854775807))
     + %s <= %s"""

    @property
    def holders(self) -> str:
        """(key,): the live holders: owner, token, ms left, permits (oldest token first)."""
        return f"""SELECT owner, token, ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint, permits
FROM {self.table} WHERE key = %s AND expires_at > clock_timestamp() ORDER BY token"""

    @property
    def purge(self) -> str:
        """Delete the rows whose lease (or queue entry) ended long ago."""
        return f"""WITH gone AS (
    DELETE FROM {self.queue} WHERE expires_at < clock_timestamp() - interval '{PURGE_AFTER_S} seconds'
)
DELETE FROM {self.table} WHERE expires_at < clock_timestamp() - interval '{PURGE_AFTER_S} seconds'"""

    @property
    def force_release(self) -> str:
        """(key,): every live slot deleted (and a NOTIFY sent at commit)."""
        return f"""DELETE FROM {self.table} WHERE key = %s AND expires_at > clock_timestamp()
RETURNING pg_notify('{self.channel}', md5(key))"""

    @property
    def held(self) -> str:
        """(key,): one row when the key has a live holder."""
        return f"SELECT 1 FROM {self.table} WHERE key = %s AND expires_at > clock_timestamp() LIMIT 1"
