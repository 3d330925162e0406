"""Opening a SQLite job: paths, the single-writer lock, schema and settings checks.

Everything here runs before the store touches a job, and refuses (with a
typed error naming the fix) anything it should not write to: a path held by
another process, a file that is not a crawlq job, a job from a newer crawlq,
a damaged database, or settings that must not change on resume.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, NoReturn
from urllib.parse import unquote

from ..._errors import (
    ConfigError,
    CorruptStore,
    IncompatibleStore,
    JobLocked,
    StoreError,
    StoreFull,
)
from ..._version import __version__
from .schema import SCHEMA, SCHEMA_VERSION, upgrade

__all__ = [
    "APPLICATION_ID",
    "SCHEMA_VERSION",
    "Guard",
    "JobLock",
    "check_header",
    "check_settings",
    "connect",
    "job_path",
    "os_error",
    "rollback",
    "store_full",
    "transaction",
    "translate",
]

#: ``PRAGMA application_id`` of a crawlq job: "cwlq".
APPLICATION_ID: Final = 0x63776C71
#: Database file name inside a job directory.
DATABASE_NAME: Final = "crawlq.db"

_SQLITE_HEADER: Final = b"SQLite format 3\x00"
#: Bytes free under which a SQLite I/O error is taken for a full disk.
_NEARLY_FULL: Final = 1 << 20


def job_path(url: str) -> Path:
    """Return the database file a ``sqlite:`` URL or a plain path names.

    ``sqlite:///rel/job.db`` is relative and ``sqlite:////abs/job.db``
    absolute (SQLAlchemy's convention). A plain path, or a URL naming an
    existing directory, is a job directory holding ``crawlq.db``.
    """
    if url.startswith("sqlite:"):
        rest = url[len("sqlite:") :]
        if not rest.startswith("///") or len(rest) == 3:
            raise ConfigError(
                f"frontier URL {url!r}: write sqlite:///relative/job.db or "
                "sqlite:////absolute/job.db (three slashes, then the path)"
            )
        path = Path(unquote(rest[3:].split("?", 1)[0]))
        if path.is_dir():
            return path / DATABASE_NAME
        return path
    path = Path(url)
    if path.exists() and not path.is_dir():
        return path
    return path / DATABASE_NAME


def os_error(url: str, exc: OSError) -> StoreError:
    """crawlq's error for an OS error met opening job ``url`` (permissions, mostly)."""
    where = exc.filename or url
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return store_full(job_path(url).absolute(), exc.strerror or str(exc), opening="opening it")
    if isinstance(exc, PermissionError):
        return StoreError(
            f"cannot open job {url}: permission denied on {where}; the crawler's user needs "
            "to read and write the job directory and every file in it (and to search its "
            "parents): fix their owner or mode (chown, chmod), or use another job path"
        )
    return StoreError(f"cannot open job {url}: {exc.strerror or exc} ({where}); check the job path")


class JobLock:
    """An exclusive lock on a job, held for as long as the frontier is open.

    It is a ``flock`` on ``<database>.lock``, which the kernel releases when
    the process dies, so a crash never leaves a stale lock behind.
    """

    def __init__(self, database: Path) -> None:
        self.path = database.with_name(database.name + ".lock")
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise `JobLocked` naming the pid that holds it."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(
                f"cannot create the lock file {self.path}: {exc.strerror}; the crawler's "
                f"user needs to write the job directory {self.path.parent}: fix its owner "
                "or mode (chown, chmod), or use another job path"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            job = self.path.with_suffix("")
            if holder == str(os.getpid()):
                raise JobLocked(
                    f"job {job} is already open in this process (pid {holder}); use the "
                    "frontier that has it open, or close it first (frontier.close())"
                ) from None
            raise JobLocked(
                f"job {job} is locked by pid {holder}; stop that crawl or use another job path"
            ) from None
        # The pid only names the holder (JobLocked's message): a full disk
        # that cannot take it leaves the lock held all the same.
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None


class Guard:
    """Every SQL statement of an open job runs under its guard.

    It refuses to start once the job met damage (``damaged``); turns sqlite3
    errors into crawlq's; marks the job damaged on `CorruptStore`. A plain
    context manager, not a generator: it runs several times per request.
    """

    __slots__ = ("damaged", "path")

    def __init__(self, path: Path) -> None:
        self.path = path
        #: True once an operation met damage: nothing is written after it.
        self.damaged = False

    def __enter__(self) -> None:
        if self.damaged:
            raise CorruptStore(
                f"job {self.path} is damaged and was not written since; run 'crawlq check "
                f"{self.path}' to see what is wrong, then restore it from a copy"
            )

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: Any
    ) -> None:
        if error is None:
            return
        try:
            if isinstance(error, sqlite3.Error):
                raise_translated(self.path, error)
        except CorruptStore:
            self.damaged = True
            raise
        if isinstance(error, CorruptStore):
            self.damaged = True


@contextlib.contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    """Run the block in one write transaction (``BEGIN IMMEDIATE``): all of it or nothing."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        rollback(db)
        raise


def rollback(db: sqlite3.Connection) -> None:
    """Roll back the failed transaction, if SQLite has not already done it.

    A ``COMMIT`` that fails for a full disk (or an I/O error) has been rolled
    back by SQLite itself: a ``ROLLBACK`` then fails ("no transaction is
    active") and would hide the error that matters, so it runs only inside a
    transaction, and its own failure never replaces the one being raised.
    """
    if db.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")


@contextlib.contextmanager
def translate(path: Path, *, opening: str = "") -> Iterator[None]:
    """Turn sqlite3 errors into crawlq's, naming the job and the fix.

    ``opening`` says what the open was doing (see `store_full`).
    """
    try:
        yield
    except sqlite3.Error as exc:
        raise_translated(path, exc, opening=opening)


def raise_translated(path: Path, exc: sqlite3.Error, *, opening: str = "") -> NoReturn:
    """Raise crawlq's error for a sqlite3 error met on job ``path`` (``opening``: at open)."""
    message = str(exc)
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        code &= 0xFF  # an extended code (SQLITE_READONLY_DIRECTORY...): its primary one
    if code == sqlite3.SQLITE_FULL or "disk is full" in message:
        raise store_full(path, message, opening=opening) from None
    if code == sqlite3.SQLITE_IOERR and (space := _space(path)) and space[1] < _NEARLY_FULL:
        # A write SQLite does not report as SQLITE_FULL: the -shm file, made
        # at open (32 KiB at a time), is the one a full disk refuses.
        raise store_full(path, message, opening=opening) from None
    if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB) or "malformed" in message:
        raise CorruptStore(
            f"job {path} is damaged ({message}); restore it from a copy. 'crawlq check "
            f"{path}' shows what is damaged (it only reads the job)"
        ) from None
    if code in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM):
        raise _not_writable(path, message) from None
    raise StoreError(f"job {path}: {message}") from None


def store_full(path: Path, message: str, *, opening: str = "") -> StoreFull:
    """`StoreFull` for job ``path``, naming its file system and the space left there.

    ``opening`` says what opening the job was doing (``"opening it"``) when
    the open failed; otherwise the operation that raised stored nothing.
    """
    space = _space(path)
    where = f"the file system holding {path.parent}"
    if space is not None:
        where = f"the file system at {space[0]} ({_size(space[1])} free of {_size(space[2])})"
    what = f"no space left for job {path} on {where}"
    if opening:
        return StoreFull(
            f"{what} while {opening} ({message}); nothing was changed, everything accepted "
            "before is safe: free disk space and open the job again"
        )
    return StoreFull(
        f"{what} ({message}); the operation was not stored, everything accepted before it "
        "is safe: free disk space and retry"
    )


def _space(path: Path) -> tuple[Path, int, int] | None:
    """The mount point, bytes free and size of the file system holding ``path``."""
    try:
        info = os.statvfs(path.parent)
        mount = path.parent.resolve()
        while not os.path.ismount(mount) and mount.parent != mount:
            mount = mount.parent
    except OSError:
        return None
    return mount, info.f_bavail * info.f_frsize, info.f_blocks * info.f_frsize


def _size(count: int) -> str:
    value, unit = float(count), ""
    for larger in ("KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger
    return f"{value:.1f} {unit}" if unit else f"{count} bytes"


def _not_writable(path: Path, message: str) -> StoreError:
    return StoreError(
        f"job {path} cannot be written ({message}); the crawler's user needs to read and "
        f"write {path.name}, its -wal and -shm files and the directory {path.parent}: "
        "fix their owner or mode (chown, chmod); 'crawlq inspect' reads a job it "
        "cannot write"
    )


def check_header(path: Path) -> bool:
    """Return True if ``path`` holds data; refuse a file that is not SQLite.

    Runs before the job lock is taken, so a foreign file gets no lock file
    beside it. Raises `IncompatibleStore` for a file that is not SQLite,
    `CorruptStore` for an empty one (SQLite would take it for a new job and
    write over it), `JobLocked` for an empty one another process is creating.
    """
    if not path.exists():
        return False
    if path.stat().st_size == 0:
        _refuse_empty(path)
    with path.open("rb") as file:
        header = file.read(len(_SQLITE_HEADER))
    if header != _SQLITE_HEADER:
        raise IncompatibleStore(
            f"{path} is not a crawlq job (not a SQLite database); "
            "point the frontier at a new path or at a crawlq job"
        )
    return True


def _refuse_empty(path: Path) -> NoReturn:
    lock = path.with_name(path.name + ".lock")
    with contextlib.suppress(FileNotFoundError):
        fd = os.open(lock, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            # Another process holds the lock: it is creating the job right now.
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise JobLocked(
                f"job {path} is locked by pid {holder}; stop that crawl or use another job path"
            ) from None
        finally:
            os.close(fd)  # closing drops a shared lock taken above
    raise CorruptStore(
        f"{path} is an empty file (0 bytes), not a crawlq job: if it is left over from a "
        f"crawl killed while it created the job, delete it (rm {path}) and open the job "
        "again; if it held a job, restore the job from a copy"
    )


def connect(path: Path, *, synchronous: str, read_only: bool = False) -> sqlite3.Connection:
    """Open the database at ``path``; create the schema if the job is new.

    Raises `IncompatibleStore` for a file that is not a crawlq job or is from
    a newer crawlq, `CorruptStore` for a damaged one; nothing is written then.
    """
    exists = check_header(path)
    if not exists and read_only:
        raise StoreError(f"there is no crawlq job at {path}")
    if exists and not read_only:
        # SQLite opens a file the user may only read without complaint and
        # fails at the first write, mid-crawl: refuse it now.
        for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            if file.exists() and not os.access(file, os.R_OK | os.W_OK):
                raise _not_writable(path, f"{file.name} is not writable by this user")
    with translate(path, opening="opening it"):
        if read_only:
            connection = sqlite3.connect(
                f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
            )
        else:
            connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            new = _check_identity(connection, path)
            if not read_only:
                connection.execute("PRAGMA journal_mode=WAL")
                connection.execute(f"PRAGMA synchronous={synchronous}")
                # Checkpoints copy the WAL into the database (with an fsync):
                # at every 40 MB instead of 4 MB they cost far less per commit.
                connection.execute("PRAGMA wal_autocheckpoint=10000")
                connection.execute("PRAGMA journal_size_limit=67108864")
            connection.execute("PRAGMA cache_size=-16384")  # 16 MiB of pages at most
            connection.execute("PRAGMA temp_store=MEMORY")
            if new and not read_only:
                connection.executescript(
                    f"BEGIN; {SCHEMA} PRAGMA application_id={APPLICATION_ID};"
                    f" PRAGMA user_version={SCHEMA_VERSION}; COMMIT;"
                )
            elif not read_only:
                upgrade(connection)
        except BaseException:
            connection.close()
            raise
    return connection


def _check_identity(connection: sqlite3.Connection, path: Path) -> bool:
    """Return True for a database with nothing in it yet; refuse a foreign one."""
    application_id = connection.execute("PRAGMA application_id").fetchone()[0]
    version = connection.execute("PRAGMA user_version").fetchone()[0]
    if application_id == 0 and version == 0:
        # Switching to WAL writes the first page before the schema exists, so
        # a job killed while being created is an empty database: create it.
        tables = connection.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if not tables:
            return True
    if application_id != APPLICATION_ID:
        raise IncompatibleStore(
            f"{path} is a SQLite database but not a crawlq job; nothing was changed: "
            "point the frontier at a new path or at a crawlq job"
        )
    if version > SCHEMA_VERSION:
        raise IncompatibleStore(
            f"job {path} was written by a newer crawlq (schema {version}, this crawlq "
            f"reads {SCHEMA_VERSION}); upgrade crawlq to resume it"
        )
    return False


def check_settings(
    connection: sqlite3.Connection, path: Path, settings: dict[str, Any], *, write: bool
) -> None:
    """Record the job's settings when new; refuse to resume with different ones."""
    rows = dict(connection.execute("SELECT key, value FROM meta").fetchall())
    if not rows:
        if write:
            connection.execute("BEGIN")
            connection.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?)",
                [
                    ("crawlq_version", __version__),
                    *((key, json.dumps(value, sort_keys=True)) for key, value in settings.items()),
                ],
            )
            connection.execute("COMMIT")
        return
    for key, value in settings.items():
        stored = rows.get(key)
        if stored is not None and json.loads(stored) != value:
            raise IncompatibleStore(
                f"job {path} was created with {key}={stored}, not {json.dumps(value)}; "
                f"resume it with the same {key}, or start a new job",
                setting=key,
            )
