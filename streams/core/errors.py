"""The project's error types: one per boundary, each a StreamsError."""

from __future__ import annotations


class StreamsError(Exception):
    """Base of every error feedback-streams raises on purpose."""


class ValidationFailed(StreamsError, ValueError):
    """Input broke a rule of the domain: a bad value, target, tenant name or rule.

    Also a ValueError, so code that guards conversions with `except ValueError` keeps working.
    """


class NotFound(StreamsError):
    """A target named by the caller is not in the log."""


class Forbidden(StreamsError, PermissionError):
    """The actor may not do this: its capabilities (or its tenant) do not allow it."""


class SchemaError(StreamsError):
    """A type cannot be mapped to Avro, or a record does not match its schema."""


class KafkaUnavailable(StreamsError):
    """The broker or the schema registry failed; wraps the client library's error."""


class IndexBehind(StreamsError):
    """A tenant's index is too far behind its events topic for a look-up to catch it up
    within its time: the message says to run `streams index build --tenant <tenant>`."""


class ScoreConfigError(StreamsError):
    """A feedback type's score configs cannot be given to a score backend."""


class SinkError(StreamsError):
    """A score sink could not hand scores on; the cursor must not advance."""


class ConfigError(StreamsError, ValueError):
    """A setting has a bad value; the message names the variable and what it allows."""


class AccessDenied(Forbidden):
    """The broker refused this principal an operation its ACLs do not allow (another
    tenant's topic or group, or wrong credentials); retrying does not help. A Forbidden, so
    one handler serves refusals by the handle's capabilities and by the broker."""


class TooLarge(ValidationFailed):
    """An input or the record it makes is over a size limit; the message names the limit."""


class Unauthorized(StreamsError):
    """No valid API key was given (missing, unknown, malformed or revoked)."""


class Conflict(StreamsError):
    """The request contradicts what is recorded: a command id that already names a different
    command of the same actor and workspace, a live queue's name given another definition."""


class SlowConsumer(StreamsError):
    """A stream subscriber left its bounded buffer full for too long; it is disconnected and
    resumes from the last seq it acknowledged."""


class MissingExtra(StreamsError, ImportError):
    """A feature's optional libraries are not installed; the message names the extra that
    installs them (`pip install 'feedback-streams[EXTRA]'`). Also an ImportError, so code
    that guards an optional import with `except ImportError` keeps working."""

    exit_code = 69
    """The command line's exit status for it (EX_UNAVAILABLE: a support program is missing)."""

    def __init__(self, extra: str, feature: str, missing: str | None = None) -> None:
        self.extra = extra
        self.feature = feature
        self.missing = missing
        detail = f" (module {missing!r} is not installed)" if missing else ""
        super().__init__(f"{feature} needs the '{extra}' extra: "
                         f"pip install 'feedback-streams[{extra}]'{detail}", name=missing)
