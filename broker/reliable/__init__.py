"""Business-level no-loss and exactly-once processing on top of broker.client (issue 9; the seed's
§6 recipe as a library): an outbox producer that records a message stub before it sends and
resends what no consumer confirmed, and an idempotent consumer that runs a handler once per
business id, checked in Redis and decided by the database. See docs/reliable.md.

Imports go one way: this package uses broker.client; nothing in broker imports it. redis-py and
psycopg are imported only when a redis:// or postgresql:// URL is used.
"""
from broker.reliable.dedup import RedisGuard
from broker.reliable.errors import (HandlerFailed, IllegalTransition, ReliableError, StoreUnavailable, StoreURLError,
                                    StubNotFound)
from broker.reliable.idempotent import IdempotentConsumer
from broker.reliable.ids import PROPERTY_RELIABLE_ID, new_id, reliable_id
from broker.reliable.log_cleaner import CleanMessageLogService
from broker.reliable.outbox import OutboxProducer, Sent
from broker.reliable.resend import ResendWorker
from broker.reliable.stores import Session, Store, open_store
from broker.reliable.stub import CONFIRMED, MANUAL, UNCONFIRMED, VOIDED, Stub

__all__ = ["CONFIRMED", "MANUAL", "PROPERTY_RELIABLE_ID", "UNCONFIRMED", "VOIDED", "CleanMessageLogService",
           "HandlerFailed", "IdempotentConsumer", "IllegalTransition", "OutboxProducer", "RedisGuard", "ReliableError",
           "ResendWorker", "Sent", "Session", "Store", "StoreURLError", "StoreUnavailable", "Stub", "StubNotFound",
           "new_id", "open_store", "reliable_id"]
