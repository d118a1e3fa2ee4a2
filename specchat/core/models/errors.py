"""One-line, user-facing errors raised by the models package."""

from __future__ import annotations

from specchat.core.types import SpecchatError


class HubAccessError(SpecchatError):
    """The repository is gated or private and the request was not authorised (401/403)."""


class HubNotFoundError(SpecchatError):
    """The repository, revision or file does not exist on the endpoint (404)."""


class HubNetworkError(SpecchatError):
    """The endpoint could not be reached, or the connection broke and did not come back."""


class DownloadCancelledError(SpecchatError):
    """The download was stopped by its CancelToken; the partial file is kept for resuming."""


class ChecksumMismatchError(SpecchatError):
    """The downloaded bytes do not hash to what the hub says; the file has been deleted."""


class NotEnoughDiskSpaceError(SpecchatError):
    """The destination folder has less free space than the download needs."""


class HubProtocolError(SpecchatError):
    """The endpoint answered, but not as a hub does (HTML, broken JSON, a redirect loop, missing fields)."""


class UnsafePathError(SpecchatError):
    """A file name, commit, ETag, revision or folder would lead outside the cache or the chosen folder."""


class DownloadStorageError(SpecchatError):
    """The download could not be written where it belongs (permissions, a file in the way, disk errors)."""


class GgufReadError(SpecchatError):
    """A file could not be read as GGUF metadata."""
