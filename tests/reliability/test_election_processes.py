"""Leader election across real processes: a SIGKILLed leader is replaced within ttl plus one
hand-off, a SIGSTOPped one loses leadership and is fenced, and terms only increase.

Durations are measured on the Redis server's clock (`TIME`), the one clock every process
shares: from just before the kill to the new leader's first act (its `elected` log line). The
design's bound is ttl + 0.5 s: the dead leader's lease ends at most ttl after its last renewal
(sent at most ttl/4 before the kill), and a queued candidate tries again right when the lease
it was told about ends. On a loaded 2-core machine a candidate process may be scheduled late,
so each hand-off is held to ttl + `SLACK` and the best of the hand-offs to the design's bound.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import pytest

from resilience.primitives import election, lock
from resilience.stores._redis import companions
from resilience.stores._redis_scripts import QUEUE_ENTRY_MS
from tests.reliability.conftest import ROOT, read_log, wait_for
from tests.reliability.election_worker import waiting_line
from tests.reliability.fencing import fenced_keys, server_us

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.redis_support import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.slow]

TTL = 1.0
BOUND = TTL + 0.5
"""The design's bound for a dead leader's replacement (seconds)."""
SLACK = 2.5
"""What a loaded machine may add to a hand-off (seconds): each one is held to ttl + SLACK."""


class Candidates:
    """Election worker processes; whatever is left is killed at teardown."""

    def __init__(self, port: int, key: str, log: str) -> None:
        self.port, self.key, self.log = port, key, log
        self.by_identity: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, identity: str) -> None:
        args = ["--port", str(self.port), "--key", self.key, "--identity", identity, "--log", self.log]
        self.by_identity[identity] = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.election_worker", *args, "--ttl", str(TTL)],
            cwd=ROOT,
            stderr=subprocess.PIPE,
        )

    def close(self) -> None:
        for process in self.by_identity.values():
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)
            if process.stderr is not None:
                process.stderr.close()


@pytest.fixture
def candidates(redis_server: RedisServer, uid: str) -> Iterator[Candidates]:
    running = Candidates(redis_server.port, f"{uid}-leader", f"log:{uid}")
    yield running
    running.close()


def _exit_code(process: subprocess.Popen[bytes], timeout: float) -> int:
    """The process's exit code; a process still running after `timeout` fails with every thread's stack."""
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGUSR1)  # the worker's faulthandler prints every thread's stack
        time.sleep(1)
        process.kill()
        _, err = process.communicate(timeout=10)
        pytest.fail(f"still running {timeout:g} s after the interrupt; its threads:\n{err.decode(errors='replace')}")


def _elected(client: Any, log: str, after: int = 0) -> tuple[str, int, int]:
    """The first leader with a term above `after`: (identity, term, server time of its first act)."""
    found: list[tuple[str, int, int]] = []

    def seen() -> bool:
        found[:] = [
            (who, int(term), int(at)) for kind, who, term, at in _lines(client, log, "elected") if int(term) > after
        ]
        return bool(found)

    wait_for(seen, timeout=30)
    return found[0]


def _lines(client: Any, log: str, kind: str) -> list[list[str]]:
    return [line for line in read_log(client, log) if line[0] == kind]


@pytest.mark.timeout(120)
def test_a_killed_leader_is_replaced_within_ttl_and_one_hand_off(
    redis_server: RedisServer, client: Any, candidates: Candidates
) -> None:
    """SIGKILL the leader twice: each time another candidate leads with a higher term, within the bound."""
    for identity in ("c0", "c1", "c2"):
        candidates.start(identity)
    leader, term, _ = _elected(client, candidates.log)
    # Hand-offs are measured once the other two wait in line (not while they start up).
    inspector = lock(client, prefix="election")
    wait_for(lambda: getattr(inspector.info(candidates.key), "waiters", None) == 2, timeout=30)
    inspector.close()
    watcher = election(client, candidates.key, ttl=TTL)
    hand_offs: list[float] = []
    terms = [term]
    for _ in range(2):
        info = watcher.leader()
        assert info is not None
        assert (info.identity, info.token) == (leader, term)  # who leads is known from outside
        killed_at = server_us(client)
        candidates.by_identity[leader].kill()
        leader, term, acted_at = _elected(client, candidates.log, after=term)
        hand_offs.append((acted_at - killed_at) / 1e6)
        terms.append(term)
    watcher.close()
    assert terms == sorted(terms)
    assert len(set(terms)) == 3
    assert all(0 < seconds <= TTL + SLACK for seconds in hand_offs), hand_offs
    assert min(hand_offs) <= BOUND, hand_offs
    _no_stale_write_accepted(client, candidates.key)


@pytest.mark.timeout(120)
def test_a_stopped_leader_loses_leadership_and_its_late_writes_are_refused(
    redis_server: RedisServer, client: Any, candidates: Candidates
) -> None:
    """SIGSTOP past the ttl: the other candidate leads; resumed, the old leader learns it lost (run raises) and is fenced."""
    candidates.start("a")
    old_leader, old_term, _ = _elected(client, candidates.log)
    candidates.start("b")
    # Measured from when "b" waits in line: a process's start on a loaded machine is not the hand-off's.
    inspector = lock(client, prefix="election")
    wait_for(lambda: getattr(inspector.info(candidates.key), "waiters", None) == 1, timeout=30)
    inspector.close()
    other = "b" if old_leader == "a" else "a"
    stopped = candidates.by_identity[old_leader]
    stopped_at = server_us(client)
    os.kill(stopped.pid, signal.SIGSTOP)
    try:
        new_leader, new_term, acted_at = _elected(client, candidates.log, after=old_term)
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
    assert new_leader == other
    assert new_term > old_term
    assert (acted_at - stopped_at) / 1e6 <= TTL + SLACK
    assert stopped.wait(timeout=30) == 0
    assert ["result", old_leader, "lost"] in read_log(client, candidates.log)
    _no_stale_write_accepted(client, candidates.key)
    # Every write of the old term the resource applied after the new leader's first write was
    # refused by fencing. Judged on the server time of each write, not the log's order: the
    # SIGSTOP may land between a write and its log line, which then follows the new leader's.
    first_new: list[int] = []

    def new_term_wrote() -> bool:
        first_new[:] = [int(line[4]) for line in _writes(client, candidates.log, new_leader) if line[3] == "1"]
        return bool(first_new)

    wait_for(new_term_wrote, timeout=30)
    late = [line for line in _writes(client, candidates.log, old_leader) if int(line[4]) > min(first_new)]
    assert all(line[3] == "0" for line in late), late


def _writes(client: Any, log: str, identity: str) -> list[list[str]]:
    """`identity`'s writes to the fenced resource: `write <identity> <term> <accepted> <server µs>`."""
    return [line for line in _lines(client, log, "write") if line[1] == identity]


def _no_stale_write_accepted(client: Any, key: str) -> None:
    """The fenced resource accepted terms in order only: no write of an older leader after a newer one's."""
    accepted = [int(line.split()[0]) for line in client.lrange(fenced_keys(key)[1], 0, -1)]
    assert accepted
    assert all(later >= earlier for earlier, later in itertools.pairwise(accepted))


# In `make soak`, not `make test`: in a fresh-clone CI run (3.11, coverage) the interrupted
# candidate once did not exit within 30 s, cause not found (CHANGELOG, known issues).
@pytest.mark.soak
@pytest.mark.timeout(120)
def test_ctrl_c_ends_a_waiting_candidate_which_leaves_the_line(
    redis_server: RedisServer, client: Any, candidates: Candidates
) -> None:
    """SIGINT to a candidate waiting in line: its `run` raises KeyboardInterrupt and its queue entry goes at once."""
    candidates.start("a")
    leader, _, _ = _elected(client, candidates.log)
    candidates.start("b")
    inspector = lock(client, prefix="election")

    def waiters() -> int | None:
        info = inspector.info(candidates.key)
        return None if info is None else info.waiters

    wait_for(lambda: waiters() == 1, timeout=30)
    waiting = candidates.by_identity["b"]
    line = waiting_line(candidates.key)
    (entry,) = client.zrange(line, 0, -1, withscores=True)
    # Left alone, its entry would stay in line until QUEUE_ENTRY_MS after its arrival or last
    # attempt (server ms); before that only leaving takes it out.
    refreshed = client.zscore(companions(f"election:{candidates.key}")[1], entry[0]) or 0
    natural_end_ms = max(int(entry[1]) // 1000 + QUEUE_ENTRY_MS, int(refreshed))
    os.kill(waiting.pid, signal.SIGINT)
    assert _exit_code(waiting, timeout=30) == 0
    (result,) = [line for line in read_log(client, candidates.log) if line[:3] == ["result", "b", "interrupted"]]
    caught_ms, gone_ms = int(result[3]) // 1000, int(result[4]) // 1000
    # Judged when it caught the interrupt a second or more before its entry would lapse (a
    # machine slower than that cannot tell leaving from lapsing).
    if caught_ms + 1000 <= natural_end_ms:
        assert gone_ms < natural_end_ms, "the interrupted candidate stayed in line until its entry lapsed"
    wait_for(lambda: waiters() == 0, timeout=30)
    info = election(client, candidates.key).leader()
    assert info is not None
    assert info.identity == leader == "a"
