"""Errors shared by every layer; each carries the exit code the command line turns it into."""

from __future__ import annotations


class KafkactlError(Exception):
    """A failure a user can cause or fix: reported as one line, never as a traceback."""

    exit_code = 1


class UsageError(KafkactlError):
    """Arguments that cannot be acted on (exit code 2, as for command-line usage errors)."""

    exit_code = 2


class CorruptRecordError(KafkactlError):
    """Bytes that do not frame, decode or checksum as a record batch."""


class InvalidRecordError(CorruptRecordError):
    """A batch that checksums but whose header disagrees with its records, or that a client may not write
    (Kafka's InvalidRecordException: INVALID_RECORD from Produce v8 on, CORRUPT_MESSAGE before).
    `record_errors`: (index of the record in its batch, why) of each record refused, when they are known one
    by one (Produce v8's record_errors: the client fails those records and retries the others)."""

    def __init__(self, message: str, record_errors: list[tuple[int, str]] | None = None) -> None:
        super().__init__(message)
        self.record_errors = record_errors or []


class OffsetOutOfRangeError(KafkactlError):
    """An offset before the log start or past the log end."""


class LogDirLockedError(KafkactlError):
    """A log dir held by a running broker."""


class InconsistentClusterIdError(KafkactlError):
    """A log dir that belongs to another cluster than ZooKeeper's (Kafka's InconsistentClusterIdException)."""


class RecordTooLargeError(KafkactlError):
    """A batch larger than `max.message.bytes` (Kafka's MESSAGE_TOO_LARGE)."""
