"""A RocketMQ 4.x remoting client (asyncio-native, with a thin blocking wrapper for scripts):
producer, pull and push consumers, admin calls, and the `broker produce|consume|admin` commands."""
from broker.client.errors import BrokerUnreachable, ClientError, RouteNotFound, SendFailed
from broker.client.message import Message, MessageExt
from broker.client.route import MessageQueue

__all__ = ["BrokerUnreachable", "ClientError", "RouteNotFound", "SendFailed", "Message", "MessageExt",
           "MessageQueue"]
