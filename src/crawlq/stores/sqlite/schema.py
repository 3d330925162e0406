"""The SQLite job's tables, and how a job of an older layout is brought to this one.

``PRAGMA user_version`` names the layout: 1 before the crawl controls, 2
before due times, 3 now. `upgrade` runs when a job is opened to write (a
reader opens it as it is: see `admin`), in one transaction, so a job is
either upgraded whole or left as it was.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Final

__all__ = ["SCHEMA", "SCHEMA_VERSION", "upgrade"]

#: ``PRAGMA user_version``: the layout of the tables below.
SCHEMA_VERSION: Final = 3

_SCHEMA_1: Final = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE hosts (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    queued INTEGER NOT NULL DEFAULT 0,
    ready_at REAL NOT NULL DEFAULT 0,
    head_negprio INTEGER,
    head_seq INTEGER,
    accepted INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX hosts_with_requests ON hosts (queued) WHERE queued > 0;
CREATE TABLE requests (
    id INTEGER PRIMARY KEY,
    host INTEGER NOT NULL,
    negprio INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    payload BLOB NOT NULL
);
CREATE INDEX requests_in_order ON requests (host, negprio, seq);
CREATE TABLE seen (fingerprint BLOB PRIMARY KEY, at REAL NOT NULL DEFAULT 0) WITHOUT ROWID;
CREATE TABLE state (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE ops (id INTEGER PRIMARY KEY, data BLOB NOT NULL);
INSERT INTO counters (name, value) VALUES ('seen', 0), ('next_id', 1);
"""

# Schema 2: the crawl controls (blocks and per-host policies), and the inbox
# other processes leave host changes in.
_SCHEMA_2: Final = """
CREATE TABLE controls (
    name TEXT PRIMARY KEY,
    blocked_until REAL,
    pace REAL NOT NULL DEFAULT 0,
    delay REAL,
    concurrency INTEGER
) WITHOUT ROWID;
CREATE TABLE inbox (id INTEGER PRIMARY KEY, data BLOB NOT NULL);
INSERT INTO counters (name, value) VALUES ('capped', 0);
"""

# Schema 3: requests not due yet (a not_before, a delayed release, a refetch),
# out of their hosts' index until then; found by due time through
# scheduled_by_due (its entries are (due, id): the rowid comes with every
# index entry), so making the due ones ready never scans the rest. The
# counters are exact: each flush moves them with the rows it writes.
_SCHEMA_3: Final = """
CREATE TABLE scheduled (
    id INTEGER PRIMARY KEY,
    host INTEGER NOT NULL,
    negprio INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    due REAL NOT NULL,
    revisit INTEGER NOT NULL DEFAULT 0,
    payload BLOB NOT NULL
);
CREATE INDEX scheduled_by_due ON scheduled (due);
INSERT INTO counters (name, value) VALUES ('scheduled', 0), ('revisits', 0), ('refetched', 0);
"""

#: The tables of a new job.
SCHEMA: Final = _SCHEMA_1 + _SCHEMA_2 + _SCHEMA_3

# What schema 2 adds to a job of schema 1: per-host accepted counts (from
# what is queued: requests acked before the upgrade were not counted), seen
# times (fingerprints stored before count from the upgrade), host controls.
_UPGRADE_1_TO_2: Final = (
    """
ALTER TABLE hosts ADD COLUMN accepted INTEGER NOT NULL DEFAULT 0;
UPDATE hosts SET accepted = queued;
ALTER TABLE seen ADD COLUMN at REAL NOT NULL DEFAULT {now};
"""
    + _SCHEMA_2
)

# What schema 3 adds to a job of schema 2: the scheduled table, empty (no
# request had a due time before), and its counters at 0. The log's records
# of schema 2 keep their meaning, so a log left by a kill is applied as is.
_UPGRADE_2_TO_3: Final = _SCHEMA_3


def upgrade(connection: sqlite3.Connection) -> None:
    """Bring a job of an older schema to this one, in one transaction.

    A job of this schema is left untouched. Raises `sqlite3.Error` (the
    caller translates it: a full disk is `StoreFull`, and the job stays as it
    was, its old schema included).
    """
    version = connection.execute("PRAGMA user_version").fetchone()[0]
    if version not in (1, 2):
        return  # this schema (a newer one was refused when the job was opened)
    steps = []
    if version == 1:
        steps.append(_UPGRADE_1_TO_2.format(now=repr(time.time())))
    steps.append(_UPGRADE_2_TO_3)
    connection.executescript(
        f"BEGIN; {''.join(steps)} PRAGMA user_version={SCHEMA_VERSION}; COMMIT;"
    )
