"""The name server's requests (RocketMQ namesrv DefaultRequestProcessor, 4.x): brokers register
(103) and unregister (104); clients ask for a topic's route (105), admin tools for the cluster
(106) and the topic list (206); mqadmin deletes a topic's route (216) and its KV entry (102) and
reads the name server's config (319). Anything else is REQUEST_CODE_NOT_SUPPORTED, as in Java."""
from __future__ import annotations

import logging
from typing import Callable

import msgspec

from broker.common.faq_url import FAQ
from broker.namesrv.route_info import RouteError, RouteInfoManager, TopicQueues
from broker.remoting import codes
from broker.remoting.command import CommandError, RemotingCommand
from broker.store.config_files import parse_fastjson

log = logging.getLogger("namesrv")

_encode = msgspec.json.encode


def parse_register_body(body: bytes) -> dict[str, TopicQueues] | None:
    """RegisterBrokerBody → topic name → queues; None when the body carries no topic table
    (RocketMQ accepts an empty body: the broker's topics then stay as they were)."""
    if not body.strip():
        return None
    try:
        data = msgspec.json.decode(body)
    except msgspec.DecodeError:
        try:  # a Java broker's fastjson may leave integer map keys unquoted
            data = parse_fastjson(body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise RouteError(f"the registration body is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise RouteError("the registration body is not a JSON object")
    wrapper = data.get("topicConfigSerializeWrapper")
    if wrapper is None:
        return None
    table = wrapper.get("topicConfigTable") if isinstance(wrapper, dict) else None
    if table is None:
        return None
    if not isinstance(table, dict):
        raise RouteError("topicConfigTable is not an object")
    out = {}
    for name, cfg in table.items():
        if not isinstance(cfg, dict):
            raise RouteError(f"topic {name!r}: its config is not an object")
        try:
            q = TopicQueues(*(int(cfg.get(k, d)) for k, d in (
                ("readQueueNums", 0), ("writeQueueNums", 0), ("perm", 6), ("topicSysFlag", 0))))
        except (TypeError, ValueError):
            raise RouteError(f"topic {name!r}: queue counts, perm and topicSysFlag must be integers") from None
        if q.readQueueNums < 0 or q.writeQueueNums < 0 or not 0 <= q.perm <= 7:
            raise RouteError(f"topic {name!r}: {q} is out of range")
        out[str(name)] = q
    return out


class NamesrvProcessor:
    def __init__(self, routes: RouteInfoManager, config_text: Callable[[], str] | None = None):
        self.routes = routes
        self.config_text = config_text  # () -> the name server's keys as properties text (GET_NAMESRV_CONFIG)
        self.handlers = {
            codes.REGISTER_BROKER: self.register_broker,
            codes.UNREGISTER_BROKER: self.unregister_broker,
            codes.GET_ROUTEINFO_BY_TOPIC: self.get_route,
            codes.GET_BROKER_CLUSTER_INFO: self.cluster_info,
            codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.topic_list,
            codes.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            codes.DELETE_KV_CONFIG: self.delete_kv_config,
            codes.GET_NAMESRV_CONFIG: self.get_config,
        }

    def handle(self, cmd: RemotingCommand, conn) -> RemotingCommand:
        fn = self.handlers.get(cmd.code)
        if fn is None:
            return cmd.response(codes.REQUEST_CODE_NOT_SUPPORTED, remark=f" request type {cmd.code} not supported")
        try:
            return fn(cmd, conn)
        except (CommandError, RouteError) as e:
            log.warning("bad request (code %d) from %s: %s", cmd.code, conn.peer, e)
            return cmd.response(codes.SYSTEM_ERROR, remark=str(e))

    def register_broker(self, cmd: RemotingCommand, conn) -> RemotingCommand:
        if cmd.get_bool("compressed"):
            raise RouteError("compressed registration bodies are not supported; register with compressed=false")
        topics = parse_register_body(bytes(cmd.body))
        # A broker keeps the connection it registers on (RocketMQ's does, and ours): its routes
        # leave the moment that connection closes, as Java's channel-closed event removes them.
        result = self.routes.register_broker(
            cmd.get_str("clusterName"), cmd.get_str("brokerAddr"), cmd.get_str("brokerName"),
            cmd.get_int("brokerId"), cmd.get_str("haServerAddr", ""), topics, channel=conn)
        # RegisterBrokerResponseHeader: a slave learns its master; Java leaves out null fields
        ext = {}
        if result.master_addr is not None:
            ext["masterAddr"] = result.master_addr
            ext["haServerAddr"] = result.ha_server_addr or ""
        return cmd.response(codes.SUCCESS, ext)

    def unregister_broker(self, cmd: RemotingCommand, conn) -> RemotingCommand:
        self.routes.unregister_broker(cmd.get_str("clusterName"), cmd.get_str("brokerAddr"),
                                      cmd.get_str("brokerName"), cmd.get_int("brokerId"))
        return cmd.response(codes.SUCCESS)

    def get_route(self, cmd: RemotingCommand, conn) -> RemotingCommand:
        topic = cmd.get_str("topic")
        route = self.routes.pickup_topic_route(topic)
        if route is None:
            return cmd.response(codes.TOPIC_NOT_EXIST,
                                remark=f"No topic route info in name server for the topic: {topic}{FAQ}")
        return cmd.response(codes.SUCCESS, body=_encode(route))

    def cluster_info(self, cmd: RemotingCommand, conn) -> RemotingCommand:
        return cmd.response(codes.SUCCESS, body=_encode(self.routes.cluster_info()))

    def delete_topic(self, cmd: RemotingCommand, conn) -> RemotingCommand:
        self.routes.delete_topic(cmd.get_str("topic"), cmd.get_str("clusterName", ""))
        return cmd.response(codes.SUCCESS)

    def delete_kv_config(self, cmd: RemotingCommand, conn) -> RemotingCommand:
        """DELETE_KV_CONFIG (mqadmin deleteTopic drops the topic's ORDER_TOPIC_CONFIG entry). This name
        server stores no KV config (PUT_KV_CONFIG is not supported), so there is nothing to delete:
        RocketMQ answers a missing key's delete with SUCCESS too."""
        cmd.get_str("namespace"), cmd.get_str("key")  # both required, as DeleteKVConfigRequestHeader
        return cmd.response(codes.SUCCESS)

    def get_config(self, cmd: RemotingCommand, conn) -> RemotingCommand:
        """mqadmin getNamesrvConfig: key=value lines, RocketMQ's key names."""
        return cmd.response(codes.SUCCESS, body=(self.config_text() if self.config_text else "").encode())

    def topic_list(self, cmd: RemotingCommand, conn) -> RemotingCommand:
        return cmd.response(codes.SUCCESS, body=_encode({"topicList": self.routes.topic_list()}))
