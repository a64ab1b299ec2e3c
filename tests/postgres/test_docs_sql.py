"""docs/postgres.md shows the SQL the stores really run (for the default tables)."""

from __future__ import annotations

from pathlib import Path

import pytest

from resilience.stores._postgres_sql import LockSql, SemaphoreSql

PAGE = (Path(__file__).parent.parent.parent / "docs" / "postgres.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "statement",
    [
        LockSql("resilience_locks").schema,
        LockSql("resilience_locks").acquire,
        LockSql("resilience_locks").renew,
        LockSql("resilience_locks").release,
        SemaphoreSql("resilience_semaphores").schema,
        SemaphoreSql("resilience_semaphores").release,
    ],
)
def test_the_page_shows_the_statement(statement: str) -> None:
    assert f"```sql\n{statement}\n```" in PAGE
