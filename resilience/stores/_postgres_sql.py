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
from resilience.stores._redis_scripts import QUEUE_BOUND, QUEUE_ENTRY_MS

__all__ = ["PURGE_AFTER_S", "TOKEN_MAX", "LockSql", "SemaphoreSql", "check_table"]

TOKEN_MAX = 2**53 - 1
"""The sequence's MAXVALUE: tokens stay exact as JSON and JavaScript numbers."""
PURGE_AFTER_S = 60
"""How long (s) a released or expired row is kept before a purge may delete it."""

_NAME = re.compile(r"[a-z_][a-z0-9_]{0,47}(\.[a-z_][a-z0-9_]{0,47})?")
# The condition of `owner`'s live lease on `key`.
_LIVE = "key = %(key)s AND owner = %(owner)s AND expires_at > clock_timestamp()"
# A renewed lease's expiry; the ms a lease has left; the condition of a row a purge deletes.
_UNTIL = "clock_timestamp() + %(ttl)s * interval '1 millisecond'"
_LEFT = "ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint"
_OLD = f"expires_at < clock_timestamp() - interval '{PURGE_AFTER_S} seconds'"


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


@dataclass(frozen=True)
class LockSql(_TableSql):
    """The statements of one lock table, its shared holds and its queue of waiters.

    `<table>`: one row per key (its exclusive holder, or none); `<table>_shared`: one row per
    shared holder; `<table>_queue`: the waiting requests of both modes, in ticket order. Every
    grant is decided by the function `<table>_acquire` with the key's row locked (`FOR UPDATE`),
    so the grants of one key are serialized and each reads the others' committed state.
    """

    @property
    def schema(self) -> str:
        """The DDL and the acquire function: idempotent, run in one transaction under an advisory lock."""
        t = self.table
        ms = "* interval '1 millisecond'"
        return f"""SELECT pg_advisory_xact_lock({_lock_id(t)}, 0);
{_sequence(t)}
CREATE SEQUENCE IF NOT EXISTS {t}_ticket AS bigint NO CYCLE;
CREATE TABLE IF NOT EXISTS {t} (
    key        text PRIMARY KEY,
    owner      text,                 -- NULL once released: the row keeps the last token
    token      bigint NOT NULL,
    expires_at timestamptz NOT NULL  -- on the database's clock
);
CREATE TABLE IF NOT EXISTS {t}_shared (
    key        text NOT NULL,
    owner      text NOT NULL,
    token      bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (key, owner)
);
CREATE TABLE IF NOT EXISTS {t}_queue (
    key        text NOT NULL,
    owner      text NOT NULL,
    shared     boolean NOT NULL,
    ticket     bigint NOT NULL,      -- arrival order
    expires_at timestamptz NOT NULL, -- the entry lapses unless its waiter tries again
    PRIMARY KEY (key, owner)
);
-- A token (> 0) when granted; else -(ms the holders have left), or 0 when a waiter ahead goes first.
CREATE OR REPLACE FUNCTION {t}_acquire(p_key text, p_owner text, p_ttl_ms bigint, p_shared boolean, p_join boolean)
RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    v_row    {t}%ROWTYPE;
    v_now    timestamptz;
    v_token  bigint;
    v_ticket bigint;
    v_until  timestamptz;
BEGIN
    LOOP  -- the key's row, locked: each grant of the key waits here for the one before
        SELECT * INTO v_row FROM {t} WHERE key = p_key FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO {t} (key, owner, token, expires_at) VALUES (p_key, NULL, 0, clock_timestamp())
            ON CONFLICT (key) DO NOTHING;
    END LOOP;
    IF NOT EXISTS (SELECT FROM {t}_shared WHERE key = p_key) AND NOT EXISTS (SELECT FROM {t}_queue WHERE key = p_key)
    THEN  -- nobody holds it shared or waits: the key's row decides alone (the common case)
        v_now := clock_timestamp();
        IF v_row.owner IS NULL OR v_row.expires_at <= v_now THEN
            v_token := nextval('{t}_token');
            IF p_shared THEN
                INSERT INTO {t}_shared (key, owner, token, expires_at)
                    VALUES (p_key, p_owner, v_token, v_now + p_ttl_ms {ms});
            ELSE
                UPDATE {t} SET owner = p_owner, token = v_token, expires_at = v_now + p_ttl_ms {ms}
                    WHERE key = p_key;
            END IF;
            RETURN v_token;
        END IF;
    END IF;
    -- Expired holds and entries go (a renewal in flight is waited for, and decides).
    DELETE FROM {t}_shared WHERE key = p_key AND expires_at <= clock_timestamp();
    DELETE FROM {t}_queue WHERE key = p_key AND expires_at <= clock_timestamp();
    v_now := clock_timestamp();
    SELECT ticket INTO v_ticket FROM {t}_queue WHERE key = p_key AND owner = p_owner;
    IF v_row.owner IS NOT NULL AND v_row.expires_at > v_now THEN
        IF v_row.owner = p_owner AND NOT p_shared THEN
            UPDATE {t} SET expires_at = v_now + p_ttl_ms {ms} WHERE key = p_key;
            RETURN v_row.token;
        END IF;
        v_until := v_row.expires_at;
    ELSIF p_shared THEN
        UPDATE {t}_shared SET expires_at = v_now + p_ttl_ms {ms}
            WHERE key = p_key AND owner = p_owner RETURNING token INTO v_token;
        IF FOUND THEN
            RETURN v_token;
        END IF;
        IF NOT EXISTS (SELECT FROM {t}_queue WHERE key = p_key AND NOT shared
                       AND (v_ticket IS NULL OR ticket < v_ticket)) THEN
            v_token := nextval('{t}_token');
            INSERT INTO {t}_shared (key, owner, token, expires_at)
                VALUES (p_key, p_owner, v_token, v_now + p_ttl_ms {ms});
            DELETE FROM {t}_queue WHERE key = p_key AND owner = p_owner;
            RETURN v_token;
        END IF;
    ELSE
        SELECT max(expires_at) INTO v_until FROM {t}_shared WHERE key = p_key;
        IF v_until IS NULL AND NOT EXISTS (SELECT FROM {t}_queue WHERE key = p_key
                                           AND (v_ticket IS NULL OR ticket < v_ticket)) THEN
            v_token := nextval('{t}_token');
            UPDATE {t} SET owner = p_owner, token = v_token, expires_at = v_now + p_ttl_ms {ms} WHERE key = p_key;
            IF v_ticket IS NOT NULL THEN
                DELETE FROM {t}_queue WHERE key = p_key AND owner = p_owner;
            END IF;
            RETURN v_token;
        END IF;
    END IF;
    IF p_join THEN
        INSERT INTO {t}_queue (key, owner, shared, ticket, expires_at)
            VALUES (p_key, p_owner, p_shared, nextval('{t}_ticket'), v_now + {QUEUE_ENTRY_MS} {ms})
            ON CONFLICT (key, owner) DO UPDATE SET shared = excluded.shared, expires_at = excluded.expires_at;
    END IF;
    RETURN -coalesce(greatest(1, ceil(extract(epoch FROM v_until - v_now) * 1000))::bigint, 0);
END
$fn$;"""

    @property
    def acquire(self) -> str:
        """(key, owner, ttl ms, shared, join) -> the function's answer (see `schema`)."""
        return f"SELECT {self.table}_acquire(%(key)s, %(owner)s, %(ttl)s, %(shared)s, %(join)s)"

    @property
    def renew(self) -> str:
        """(key, owner, ttl ms): one row when `owner` holds the live lease (either mode), pushed out."""
        t = self.table
        return f"""WITH x AS (UPDATE {t} SET expires_at = {_UNTIL} WHERE {_LIVE} RETURNING 1),
s AS (UPDATE {t}_shared SET expires_at = {_UNTIL} WHERE {_LIVE} RETURNING 1)
SELECT 1 FROM x UNION ALL SELECT 1 FROM s"""

    @property
    def release(self) -> str:
        """(key, owner): 1 when `owner` held the live lease (either mode), 0 when it only left the queue.

        No row when it did neither. When something changed, NOTIFYs are sent at commit: the
        key's digest (for waiters outside the queue) and `<digest> <owner>` for each queued
        waiter whose turn it may be now (the head; the shared requests at the head together).
        """
        t = self.table
        return f"""WITH x AS (UPDATE {t} SET owner = NULL, expires_at = clock_timestamp() WHERE {_LIVE}
    RETURNING 1 AS held),
s AS (DELETE FROM {t}_shared WHERE {_LIVE} RETURNING 1 AS held),
q AS (DELETE FROM {t}_queue WHERE key = %(key)s AND owner = %(owner)s RETURNING 0 AS held),
changed AS (SELECT held FROM x UNION ALL SELECT held FROM s UNION ALL SELECT held FROM q),
{self._turns}
SELECT max(held) FROM changed, {self._notified} HAVING count(*) > 0"""

    @property
    def _turns(self) -> str:
        """CTEs `waiting`, `turns`: the queued owners (but the caller) whose turn may have come."""
        t = self.table
        return f"""waiting AS (SELECT owner, shared, ticket FROM {t}_queue
    WHERE key = %(key)s AND owner IS DISTINCT FROM %(owner)s AND expires_at > clock_timestamp()),
turns AS (SELECT owner FROM waiting WHERE ticket = (SELECT min(ticket) FROM waiting)
    OR (shared AND ticket < coalesce((SELECT min(ticket) FROM waiting WHERE NOT shared), {TOKEN_MAX})))"""

    @property
    def _notified(self) -> str:
        """Per changed row (once), the NOTIFYs of a release: the key's digest, and `<digest> <owner>` per turn."""
        return f"""LATERAL (
    SELECT pg_notify('{self.channel}', md5(%(key)s))
    UNION ALL SELECT pg_notify('{self.channel}', md5(%(key)s) || ' ' || owner) FROM turns
) notified"""

    @property
    def holders(self) -> str:
        """(key,): the live holders of one key, by token: owner, token, ms left, shared, waiters.

        `waiters` is how many requests wait in the key's queue (the same on every row).
        """
        t = self.table
        waiters = f"(SELECT count(*) FROM {t}_queue WHERE key = %(key)s AND expires_at > clock_timestamp())"
        return f"""SELECT owner, token, {_LEFT}, false, {waiters} FROM {t}
WHERE key = %(key)s AND owner IS NOT NULL AND expires_at > clock_timestamp()
UNION ALL
SELECT owner, token, {_LEFT}, true, {waiters} FROM {t}_shared WHERE key = %(key)s AND expires_at > clock_timestamp()
ORDER BY 2"""

    @property
    def held_keys(self) -> str:
        """(): every key with a live holder, in order (for `python -m resilience locks list`)."""
        t = self.table
        return f"""SELECT key FROM {t} WHERE owner IS NOT NULL AND expires_at > clock_timestamp()
UNION SELECT key FROM {t}_shared WHERE expires_at > clock_timestamp() ORDER BY key"""

    @property
    def held(self) -> str:
        """(key,): one row when someone holds the key (either mode)."""
        t = self.table
        return f"""SELECT 1 FROM {t} WHERE key = %(key)s AND owner IS NOT NULL AND expires_at > clock_timestamp()
UNION ALL SELECT 1 FROM {t}_shared WHERE key = %(key)s AND expires_at > clock_timestamp() LIMIT 1"""

    @property
    def turn(self) -> str:
        """(key, owner): whether `owner`, waiting in the queue, may be granted now (else: whether nothing is held)."""
        t = self.table
        now = "clock_timestamp()"
        return f"""SELECT coalesce((
    SELECT NOT EXISTS (SELECT FROM {t} WHERE key = q.key AND owner IS NOT NULL AND expires_at > {now})
        AND NOT EXISTS (SELECT FROM {t}_queue a WHERE a.key = q.key AND a.ticket < q.ticket
                        AND a.expires_at > {now} AND (NOT q.shared OR NOT a.shared))
        AND (q.shared OR NOT EXISTS (SELECT FROM {t}_shared WHERE key = q.key AND expires_at > {now}))
    FROM {t}_queue q WHERE q.key = %(key)s AND q.owner = %(owner)s
), NOT EXISTS ({self.held}))"""

    @property
    def force_release(self) -> str:
        """(key, owner NULL): > 0 when live holds of the key were freed, whoever held them (NOTIFYs as `release`)."""
        t = self.table
        return f"""WITH x AS (UPDATE {t} SET owner = NULL, expires_at = clock_timestamp()
    WHERE key = %(key)s AND owner IS NOT NULL AND expires_at > clock_timestamp() RETURNING 1),
s AS (DELETE FROM {t}_shared WHERE key = %(key)s AND expires_at > clock_timestamp() RETURNING 1),
freed AS (SELECT 1 FROM x UNION ALL SELECT 1 FROM s),
{self._turns}
SELECT count(*) FROM freed, {self._notified}"""

    @property
    def purge(self) -> str:
        """Delete the rows whose lease (or queue entry) ended long ago (bounded tables for unbounded keys)."""
        t = self.table
        return f"""WITH s AS (DELETE FROM {t}_shared WHERE {_OLD}), q AS (DELETE FROM {t}_queue WHERE {_OLD})
DELETE FROM {t} WHERE {_OLD}"""


@dataclass(frozen=True)
class SemaphoreSql(_TableSql):
    """The statements of one semaphore table (and of its waiters' queue, `<table>_queue`)."""

    @property
    def schema(self) -> str:
        """The DDL and the acquire function: idempotent, one transaction under an advisory lock."""
        t = self.table
        q = f"{t}_queue"
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
        return f"SELECT {self.table}_acquire(%(key)s, %(owner)s, %(ttl)s, %(limit)s, %(permits)s, %(entry_ms)s)"

    @property
    def renew(self) -> str:
        """(key, owner, ttl ms): one row when `owner` holds a live slot, pushed out."""
        return f"""UPDATE {self.table} SET expires_at = {_UNTIL}
WHERE {_LIVE} RETURNING 1"""

    @property
    def release(self) -> str:
        """(key, owner) -> (1 when `owner` held live slots, now freed, else 0).

        A waiter that holds nothing leaves the queue instead. Either way a NOTIFY is sent at
        commit, so the waiters check whether their slots are now free.
        """
        t = self.table
        return f"""WITH released AS (
    DELETE FROM {t} WHERE {_LIVE} RETURNING key
), gone AS (
    DELETE FROM {t}_queue WHERE key = %(key)s AND owner = %(owner)s RETURNING key
), told AS (
    SELECT pg_notify('{self.channel}', md5(key)) FROM released
    UNION ALL SELECT pg_notify('{self.channel}', md5(key)) FROM gone
)
SELECT (SELECT count(*) FROM released), (SELECT count(*) FROM told)"""

    @property
    def turn(self) -> str:
        """(key, owner, permits, limit) -> whether `owner` may take its slots now."""
        t = self.table
        now = "clock_timestamp()"
        return f"""SELECT EXISTS (SELECT FROM {t} WHERE key = %(key)s AND owner = %(owner)s AND expires_at > {now})
    OR (SELECT coalesce(sum(permits), 0) FROM {t} WHERE key = %(key)s AND expires_at > {now})
     + (SELECT coalesce(sum(w.permits), 0) FROM {t}_queue w WHERE w.key = %(key)s AND w.expires_at > {now}
        AND w.arrival < coalesce((SELECT arrival FROM {t}_queue WHERE key = w.key AND owner = %(owner)s),
                                 9223372036854775807))
     + %(permits)s <= %(limit)s"""

    @property
    def holders(self) -> str:
        """(key,): the live holders: owner, token, ms left, permits (oldest token first)."""
        return f"""SELECT owner, token, {_LEFT}, permits
FROM {self.table} WHERE key = %(key)s AND expires_at > clock_timestamp() ORDER BY token"""

    @property
    def purge(self) -> str:
        """Delete the rows whose lease (or queue entry) ended long ago."""
        return f"""WITH gone AS (
    DELETE FROM {self.table}_queue WHERE {_OLD}
)
DELETE FROM {self.table} WHERE {_OLD}"""

    @property
    def force_release(self) -> str:
        """(key,): how many live slots were deleted (and a NOTIFY sent at commit for each)."""
        return f"""WITH freed AS (DELETE FROM {self.table} WHERE key = %(key)s AND expires_at > clock_timestamp()
    RETURNING pg_notify('{self.channel}', md5(key)))
SELECT count(*) FROM freed"""

    @property
    def held(self) -> str:
        """(key,): one row when the key has a live holder."""
        return f"SELECT 1 FROM {self.table} WHERE key = %(key)s AND expires_at > clock_timestamp() LIMIT 1"
