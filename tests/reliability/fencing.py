"""The fenced resource and the checker of the exclusion tests.

The resource is a Redis key on the test server: a write carries the writer's fencing token and
is accepted only when the token is >= the highest token accepted so far (one Lua script, so the
check and the write are atomic). Accepted and rejected writes are appended, in the order the
server applied them, to two lists, which the checker reads.

**How overlap is judged.** Local monotonic clocks of different processes are not comparable,
so every critical section reads the *server's* `TIME` (µs) when it starts and when it ends,
and keeps an in-server gauge (`INCR` on entry, `DECR` on exit) whose value on entry must be 1.
Two holders of one key overlapped if their `[start, end]` server-time intervals intersect, or
if a holder saw the gauge above 1. One Redis server is single-threaded, so its clock orders
the commands of all processes.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FENCED_WRITE", "Checker", "Record", "fenced_write", "fenced_write_at", "server_us"]

# The keys: the highest accepted token, the accepted log, the rejected log; the arguments:
# the token and the writer.
FENCED_WRITE = """
local raw = redis.call('GET', KEYS[1]) or '0'
local highest = tonumber(raw)
local token = tonumber(ARGV[1])
if token >= highest then
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. ARGV[2])
  return 1
end
redis.call('RPUSH', KEYS[3], ARGV[1] .. ' ' .. raw .. ' ' .. ARGV[2])
return 0
"""
# Tokens are below 2^53 and travel as strings; `tonumber` keeps them exact for the comparison,
# and only the original strings are stored or logged (`tostring` of a Lua number keeps 14
# significant digits: 1796010226892244 would print as 1.796010226892e+15).


def fenced_keys(key: str) -> list[str]:
    return [f"fenced:{key}:highest", f"fenced:{key}:accepted", f"fenced:{key}:rejected"]


def fenced_write(client: Any, key: str, token: int, writer: str) -> bool:
    """Write to the fenced resource of `key` with `token`: True if the resource accepted it."""
    return bool(client.eval(FENCED_WRITE, 3, *fenced_keys(key), str(token), writer))


def fenced_write_at(client: Any, key: str, token: int, writer: str) -> tuple[bool, int]:
    """As `fenced_write`, with the server's clock (µs) read in the same transaction: when it was applied."""
    with client.pipeline(transaction=True) as pipe:
        pipe.eval(FENCED_WRITE, 3, *fenced_keys(key), str(token), writer)
        pipe.time()
        accepted, (seconds, micros) = pipe.execute()
    return bool(accepted), int(seconds) * 1_000_000 + int(micros)


def server_us(client: Any) -> int:
    """The server's clock in microseconds (`TIME`)."""
    seconds, micros = client.time()
    return int(seconds) * 1_000_000 + int(micros)


@dataclass
class Record:
    """One critical section as its worker saw it (server clock, token, write result)."""

    key: str
    token: int
    start: int
    end: int
    gauge: int
    accepted: bool
    writer: str
    lost: bool = False

    def dumps(self) -> str:
        return json.dumps(self.__dict__)

    @classmethod
    def loads(cls, text: str | bytes) -> Record:
        return cls(**json.loads(text))


@dataclass
class Checker:
    """Proves exclusion and fencing from the records and the resource's logs."""

    records: list[Record]
    problems: list[str] = field(default_factory=list)

    def check(self, client: Any, keys: list[str]) -> list[str]:
        by_key: dict[str, list[Record]] = {}
        for record in self.records:
            by_key.setdefault(record.key, []).append(record)
        for key in keys:
            self._exclusion(key, sorted(by_key.get(key, []), key=lambda r: r.start))
            self._fencing(client, key)
        return self.problems

    def _exclusion(self, key: str, records: list[Record]) -> None:
        clean = [r for r in records if not r.lost]
        for record in clean:
            if record.gauge != 1:
                self.problems.append(f"{key}: {record.writer} entered with {record.gauge} holders inside")
            if not record.accepted:
                self.problems.append(f"{key}: a live holder's write was rejected: {record}")
        for before, after in itertools.pairwise(clean):
            if after.start < before.end:
                self.problems.append(f"{key}: overlap {before} / {after}")
            if after.token <= before.token:
                self.problems.append(f"{key}: token did not increase {before.token} -> {after.token}")

    def _fencing(self, client: Any, key: str) -> None:
        _, accepted_key, rejected_key = fenced_keys(key)
        accepted = [int(line.split()[0]) for line in client.lrange(accepted_key, 0, -1)]
        for before, after in itertools.pairwise(accepted):
            if after < before:
                self.problems.append(f"{key}: accepted token {after} after {before}")
        for line in client.lrange(rejected_key, 0, -1):
            token, highest = (int(part) for part in line.split()[:2])
            if token >= highest:
                self.problems.append(f"{key}: write with token {token} rejected though highest was {highest}")

    def accepted_count(self, client: Any, key: str) -> int:
        return int(client.llen(fenced_keys(key)[1]))

    def rejected_count(self, client: Any, key: str) -> int:
        return int(client.llen(fenced_keys(key)[2]))
