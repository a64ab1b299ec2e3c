"""A candidate of the election process tests: `python -m tests.reliability.election_worker ...`.

It runs `election(client, key, identity=..., ttl=...).run(lead)` on the test server and logs to
a Redis list, with the server's clock (µs): `elected <identity> <term> <time>` on its first act
as leader, `write <identity> <term> <accepted> <time>` for each write to the fenced resource
of the key (`fencing.py`) while it believes it leads (the time the resource applied it: a
process stopped between the write and its log line logs it late), and `result <identity> returned|lost`
at the end, or `result <identity> interrupted <caught at> <seen out of line at>`.
"""

from __future__ import annotations

import argparse
import faulthandler
import signal
import time

import redis

from resilience import LockLeaseLostError
from resilience.primitives import LockHandle, election
from resilience.stores._redis import companions
from tests.reliability.fencing import fenced_write_at, server_us


def waiting_line(key: str) -> str:
    """The Redis key of the election's waiter queue (arrivals, scored in server µs)."""
    line = companions(f"election:{key}")
    assert line is not None
    return line[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--identity", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--ttl", type=float, required=True)
    parser.add_argument("--lead-for", type=float, default=60.0)
    args = parser.parse_args()
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # a test that finds it stuck asks where
    client = redis.Redis(port=args.port, socket_timeout=5, socket_connect_timeout=5, decode_responses=True)
    candidate = election(client, args.key, identity=args.identity, ttl=args.ttl)

    def lead(handle: LockHandle) -> None:
        client.rpush(args.log, f"elected {args.identity} {handle.token} {server_us(client)}")
        for _ in range(int(args.lead_for / 0.05)):
            if handle.signal.aborted:
                return
            accepted, at = fenced_write_at(client, args.key, handle.token, args.identity)
            client.rpush(args.log, f"write {args.identity} {handle.token} {int(accepted)} {at}")
            handle.signal.wait(0.05)

    try:
        candidate.run(lead)
    except LockLeaseLostError:
        client.rpush(args.log, f"result {args.identity} lost")
    except KeyboardInterrupt:
        # When (server µs) it was caught, and when our entry was seen gone from the line: it
        # leaves in the background (a release on the store's pool), so look for up to 10 s.
        caught = server_us(client)
        for _ in range(1000):
            if not any(owner.endswith(f":{args.identity}") for owner in client.zrange(waiting_line(args.key), 0, -1)):
                break
            time.sleep(0.01)
        client.rpush(args.log, f"result {args.identity} interrupted {caught} {server_us(client)}")
    else:
        client.rpush(args.log, f"result {args.identity} returned")
    finally:
        candidate.close()
        client.close()


if __name__ == "__main__":
    main()
