"""pgqueue: a PostgreSQL-native job queue."""

from pgqueue.errors import (
    QueueConfigurationError,
    QueueDispatchError,
    QueueError,
    QueueLeaseError,
    QueuePayloadError,
    QueueRetryError,
    QueueStorageError,
)

__all__ = [
    "QueueConfigurationError",
    "QueueDispatchError",
    "QueueError",
    "QueueLeaseError",
    "QueuePayloadError",
    "QueueRetryError",
    "QueueStorageError",
]
