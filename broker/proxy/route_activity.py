"""RouteActivity: QueryRoute (a topic's queues, every one served at this front's address) and
QueryAssignment (the queues a push consumer of a group reads, here every readable queue, which the
front pops from for it)."""
from __future__ import annotations

from broker.client.client_instance import MQClientInstance
from broker.client.route import PERM_READ, PERM_WRITE, TopicRoute
from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb
from broker.proxy.status import Code, ProxyError, from_client_error, status
from broker.common.topic_validator import TopicError, check_topic_name

# what a topic with no message.type attribute accepts here: every type (broker.proxy.topic_types)
_ACCEPT = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)


def validate_topic(resource: pb.Resource) -> str:
    """The broker's own rule (TopicValidator): a topic it would refuse is ILLEGAL_TOPIC here."""
    try:
        check_topic_name(resource.name)
    except TopicError as e:
        raise ProxyError(Code.ILLEGAL_TOPIC, str(e)) from None
    return resource.name


def message_queues(topic: str, route: TopicRoute, endpoints: pb.Endpoints,
                   accept: list[int] | tuple = _ACCEPT) -> list[pb.MessageQueue]:
    """RouteActivity.genMessageQueueFromQueueData: min(read, write) READ_WRITE queues, then the
    extra read-only or write-only ones; only brokers with a master (id 0) are listed."""
    out = []
    masters = route.broker_addrs()
    for qd in sorted(route.queueDatas, key=lambda q: q.brokerName):
        if qd.brokerName not in masters:
            continue
        broker = pb.Broker(name=qd.brokerName, id=0, endpoints=endpoints)
        read = qd.readQueueNums if qd.perm & PERM_READ else 0
        write = qd.writeQueueNums if qd.perm & PERM_WRITE else 0
        for i in range(max(read, write)):
            perm = pb.READ_WRITE if i < read and i < write else pb.READ if i < read else pb.WRITE
            out.append(pb.MessageQueue(topic=pb.Resource(name=topic), id=i, permission=perm, broker=broker,
                                       accept_message_types=accept))
    return out


class RouteActivity:
    def __init__(self, client: MQClientInstance, topic_types=None):
        self.client = client
        self.topic_types = topic_types  # TopicTypes: the types a topic's queues accept

    async def query_route(self, request: spb.QueryRouteRequest, context) -> spb.QueryRouteResponse:
        topic = validate_topic(request.topic)
        if not request.endpoints.addresses:
            raise ProxyError(Code.ILLEGAL_ACCESS_POINT, "endpoints is empty: the client names the address it dialed")
        try:
            route = await self.client.routes.get(topic, refresh=True)
        except Exception as e:  # noqa: BLE001 - the remoting side's failure, answered as a Status
            return spb.QueryRouteResponse(status=status(*from_client_error(e)))
        accept = await self.topic_types.accepted(topic) if self.topic_types is not None else _ACCEPT
        queues = message_queues(topic, route, request.endpoints, accept)
        if not queues:
            return spb.QueryRouteResponse(status=status(Code.TOPIC_NOT_FOUND, f"topic {topic} has no queue on a master"))
        return spb.QueryRouteResponse(status=status(), message_queues=queues)

    async def query_assignment(self, request: spb.QueryAssignmentRequest, context) -> spb.QueryAssignmentResponse:
        topic = validate_topic(request.topic)
        try:
            route = await self.client.routes.get(topic)
        except Exception as e:  # noqa: BLE001
            return spb.QueryAssignmentResponse(status=status(*from_client_error(e)))
        # one assignment per readable broker (queue id -1: the broker pops from any of its queues)
        out = [pb.Assignment(message_queue=pb.MessageQueue(
            topic=pb.Resource(name=topic), id=-1, permission=pb.READ_WRITE,
            broker=pb.Broker(name=name, id=0, endpoints=request.endpoints), accept_message_types=_ACCEPT))
            for name in sorted({qd.brokerName for qd in route.queueDatas if qd.perm & PERM_READ})
            if route.master_addr(name)]
        if not out:
            return spb.QueryAssignmentResponse(status=status(Code.TOPIC_NOT_FOUND, f"topic {topic} has no readable queue"))
        return spb.QueryAssignmentResponse(status=status(), assignments=out)
