"""The copy a delay level or a timer delivers: the held message written to the topic and queue its
REAL_TOPIC / REAL_QID name (ScheduleMessageService's messageTimeup, TimerMessageStore's
convertMessage), with its body, flags, born time and host and reconsume times as stored."""
from __future__ import annotations

from broker.store.message import encode_properties, host_bytes

REAL_TOPIC, REAL_QID = "REAL_TOPIC", "REAL_QID"


def destination(topics, props: dict, drop: bool = False) -> tuple[str, int] | None:
    """(topic, queue) a held message goes to, created if need be; a queue past the topic's write
    queues goes to 0. None when it names no topic. `drop` removes REAL_TOPIC / REAL_QID from `props`."""
    get = props.pop if drop else props.get
    topic = get(REAL_TOPIC, "")
    try:
        queue_id = int(get(REAL_QID, "0"))
    except ValueError:
        queue_id = 0
    if not topic:
        return None
    cfg = topics.get_or_create(topic)
    if cfg is not None and queue_id >= cfg.writeQueueNums:
        queue_id = 0
    return topic, queue_id


def append_copy(store, topic: str, queue_id: int, msg, props: dict):
    """Store the copy (no wait for a flush or a slave); StoreError / ServiceUnavailable when the
    store refuses it. Returns the put's result."""
    result, _ = store.append(topic, queue_id, msg.body, encode_properties(props), flag=msg.flag,
                             sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp,
                             born_host=host_bytes(msg.born_host), reconsume_times=msg.reconsume_times, wait=False)
    return result
