"""`on_lock_lost` has run, and `OnLockLost` was emitted, before the execution returns.

DESIGN §2.7 revision 3 (b): a process that exits right after `execute` has seen its loss
callbacks run. Real processes (`lost_worker.py`) on a real Redis: the key is force-released
(deleted) under the holder, the loss is found by a renewal in the background or by the final
release, and the process exits the moment `execute` returns.
"""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from tests.reliability.conftest import ROOT

if TYPE_CHECKING:
    from tests.redis_support import RedisServer

pytestmark = pytest.mark.redis


@pytest.mark.timeout(60)
@pytest.mark.parametrize("when", ["renewal", "release"])
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_on_lock_lost_ran_before_execute_returned_in_a_process_that_exits_at_once(
    redis_server: RedisServer, uid: str, flavour: str, when: str
) -> None:
    """The slow callback's line comes before the return's, and the return saw OnLockLost."""
    args = [sys.executable, "-m", "tests.reliability.lost_worker", str(redis_server.port), uid, flavour, when]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, timeout=30, check=False)
    lines = done.stdout.decode().split()
    assert done.returncode == 0, done.stderr.decode()
    assert lines[:1] == ["lost-done"], (lines, done.stderr.decode()[-2000:])
    assert lines[1] == "returned"
    assert "OnLockLost" in lines[2].split(","), lines


@pytest.mark.timeout(60)
@pytest.mark.parametrize("when", ["renewal", "release"])
@pytest.mark.parametrize("flavour", ["primitive", "primitive-async"])
def test_the_primitives_lost_event_is_emitted_before_run_returns(
    redis_server: RedisServer, uid: str, flavour: str, when: str
) -> None:
    """`lock(client).run(...)` raised the loss error only after `OnLockLost` was emitted."""
    args = [sys.executable, "-m", "tests.reliability.lost_worker", str(redis_server.port), uid, flavour, when]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, timeout=30, check=False)
    lines = done.stdout.decode().split()
    assert done.returncode == 0, done.stderr.decode()
    assert lines[:1] == ["returned"], (lines, done.stderr.decode()[-2000:])
    assert "OnLockLost" in lines[1].split(","), lines
