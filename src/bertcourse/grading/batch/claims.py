"""Several graders, one class: a claims table in the PostgreSQL gradebook says who grades what.

Every `bertcourse autograde --db-url postgresql://...` process, on any machine, enlists the class's
submissions in the table `bertcourse_claims` (one row per `student/exercise`, with the submission's
key), then claims one row at a time in a transaction (`FOR UPDATE SKIP LOCKED`, so two graders never
take the same row and never wait on each other), grades it and marks it done with its record. A claim
is a lease on database time (`lease_until`), which a heartbeat thread renews for as long as the grader
lives; a grader that dies stops renewing, and once its lease has run out any other grader takes the row
over. A grader whose claim was taken over (it stalled past its lease) finds the row no longer its own
when it finishes, and drops its result: each submission is recorded by exactly one grader.

Everything is timed by the database's clock, so the graders' clocks need not agree. SQLite has no row
locks and one writer: a SQLite gradebook keeps one grader (`shared` says which URLs take claims).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

TABLE = "bertcourse_claims"
LOCK_ID = 0x62657274  # the advisory lock that serialises enlisting and gradebook setup across graders
DEFAULT_LEASE_S = 60.0

_SCHEMA = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    label text PRIMARY KEY,              -- student/exercise
    key text NOT NULL,                   -- what the grade depends on (layout.submission_key)
    state text NOT NULL DEFAULT 'todo',  -- todo | claimed | done
    owner text,                          -- the grader holding (or that finished) the row
    lease_until timestamptz,             -- a claim whose lease ran out may be taken over
    attempts integer NOT NULL DEFAULT 0, -- claims taken on this row (1 unless a grader died or stalled)
    record text                          -- the finished Record as JSON (records.py)
)"""

_ENLIST = f"""INSERT INTO {TABLE} (label, key) VALUES (:label, :key)
ON CONFLICT (label) DO UPDATE SET key = EXCLUDED.key, state = 'todo', owner = NULL, lease_until = NULL,
    attempts = 0, record = NULL
WHERE {TABLE}.key <> EXCLUDED.key OR :force"""

_CLAIM = f"""WITH next AS (
    SELECT label FROM {TABLE}
    WHERE label = ANY(:labels)
      AND (state = 'todo' OR (state = 'claimed' AND lease_until < clock_timestamp()))
    ORDER BY label LIMIT 1 FOR UPDATE SKIP LOCKED)
UPDATE {TABLE} AS c SET state = 'claimed', owner = :owner, attempts = c.attempts + 1,
    lease_until = clock_timestamp() + make_interval(secs => :lease)
FROM next WHERE c.label = next.label RETURNING c.label"""


def shared(db_url: str) -> bool:
    """Whether graders can share the class through this gradebook: PostgreSQL, not SQLite."""
    return db_url.split(":", 1)[0].split("+", 1)[0] in {"postgresql", "postgres"}


class Claims:
    """This grader's side of the claims table: enlist, claim, finish, read back the records.

    Use it as a context manager: it starts the heartbeat on entry and, on exit, stops it and hands back
    the claims it still holds (an interrupted grader's rows go to the others at once, not after a lease).
    Open it after the grading lanes have forked: its connections and its thread stay in this process.
    """

    def __init__(self, db_url: str, lease_s: float = DEFAULT_LEASE_S, poll_s: float | None = None):
        import sqlalchemy

        if lease_s <= 0:
            raise ValueError(f"the lease must be positive, got {lease_s}")
        self.lease_s = float(lease_s)
        self.poll_s = poll_s if poll_s is not None else min(5.0, self.lease_s / 4)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.labels: list[str] = []
        self._text = sqlalchemy.text
        self._engine = sqlalchemy.create_engine(db_url, pool_pre_ping=True)
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def __enter__(self) -> Claims:
        self._heartbeat = threading.Thread(target=self._beat, name="bertcourse-claims-heartbeat", daemon=True)
        self._heartbeat.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
        with contextlib.suppress(Exception):  # the database may be what failed; the leases then run out
            self._run(f"UPDATE {TABLE} SET state = 'todo', owner = NULL, lease_until = NULL "
                      "WHERE owner = :owner AND state = 'claimed'", owner=self.owner)
        self._engine.dispose()

    def _run(self, sql: str, **params: Any) -> list[Any]:
        with self._engine.begin() as connection:
            result = connection.execute(self._text(sql), params)
            return list(result) if result.returns_rows else []

    def _beat(self) -> None:
        """Renew this grader's leases every third of a lease, until the grader exits or dies."""
        while not self._stop.wait(self.lease_s / 3):
            with contextlib.suppress(Exception):  # a lost connection: retried on the next beat
                self._run(f"UPDATE {TABLE} SET lease_until = clock_timestamp() + make_interval(secs => :lease) "
                          "WHERE owner = :owner AND state = 'claimed'", owner=self.owner, lease=self.lease_s)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """One grader at a time in this block (across machines): for creating tables and registering the
        exercises, which would collide when graders start together. Released if this process dies."""
        with self._engine.connect() as connection:
            connection.execute(self._text("SELECT pg_advisory_lock(:id)"), {"id": LOCK_ID})
            try:
                yield
            finally:
                connection.execute(self._text("SELECT pg_advisory_unlock(:id)"), {"id": LOCK_ID})
                connection.commit()

    def enlist(self, keys: Mapping[str, str], force: bool = False) -> None:
        """Add these submissions ({label: key}) to the table; a row whose key changed (the submission or
        its checks did) is to be graded again, and with `force` every row is. Call inside `exclusive`."""
        self._run(_SCHEMA)
        if keys:
            with self._engine.begin() as connection:
                connection.execute(self._text(_ENLIST),
                                   [{"label": label, "key": key, "force": force} for label, key in keys.items()])
        self.labels = list(keys)

    def claim(self, wait: bool) -> str | None:
        """The label of a submission this grader now holds: one nobody holds, or one whose holder's lease
        ran out. None when there is none: at once without `wait`; with it, only once every enlisted
        submission is done (it waits, polling, while other graders hold the rest)."""
        while True:
            rows = self._run(_CLAIM, labels=self.labels, owner=self.owner, lease=self.lease_s)
            if rows:
                return str(rows[0][0])
            if not wait or self.remaining() == 0:
                return None
            time.sleep(self.poll_s)

    def remaining(self) -> int:
        """How many enlisted submissions are not done yet."""
        rows = self._run(f"SELECT count(*) FROM {TABLE} WHERE label = ANY(:labels) AND state <> 'done'",
                         labels=self.labels)
        return int(rows[0][0])

    def holds(self, label: str) -> bool:
        """Whether this grader still holds the claim on `label` (not taken over meanwhile)."""
        return bool(self._run(f"SELECT 1 FROM {TABLE} WHERE label = :label AND owner = :owner "
                              "AND state = 'claimed'", label=label, owner=self.owner))

    def finish(self, label: str, key: str, record_json: str) -> bool:
        """Mark `label` done with its record; False (nothing changed) when the claim is no longer ours.
        The key stored is the record's: a record without one (a lane failure) is graded again next run."""
        return bool(self._run(f"UPDATE {TABLE} SET state = 'done', key = :key, record = :record, "
                              "lease_until = NULL WHERE label = :label AND owner = :owner AND state = 'claimed' "
                              "RETURNING label", label=label, key=key, record=record_json, owner=self.owner))

    def records(self, labels: Sequence[str] | None = None) -> dict[str, str]:
        """{label: record JSON} of the done submissions among `labels` (default: the enlisted ones)."""
        rows = self._run(f"SELECT label, record FROM {TABLE} WHERE label = ANY(:labels) AND state = 'done'",
                         labels=list(self.labels if labels is None else labels))
        return {str(label): str(record) for label, record in rows}
