"""`broker produce`, `broker consume` and `broker admin ...`: the client as commands.

broker/cli.py calls `add_commands(sub)` to add the subcommands and `run(args)` for them. A
failure the user can act on (a name server or broker that cannot be reached, a refused request)
is one line on stderr and exit status 2, never a traceback.

An admin command that mirrors an mqadmin command takes mqadmin's letters and long names beside
our own flags (topic create ~ updateTopic: -t -r -w -p -o -b -c; every command: -n namesrvAddr),
so that an mqadmin command line works with `broker admin ...` in front of it.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys

from broker.client.admin import LONG_MAX, Admin
from broker.client.errors import ClientError
from broker.client.message import Message, MessageExt
from broker.client.producer import Producer
from broker.client.push_consumer import PushConsumer

SEND_WINDOW = 64  # sends in flight at once for --count


def _namesrv_default() -> str:
    return os.environ.get("NAMESRV_ADDR") or "127.0.0.1:9876"


def add_commands(sub) -> None:
    def with_namesrv(p):
        p.add_argument("-n", "--namesrv", "--namesrvAddr", dest="namesrv", default=_namesrv_default(),
                       metavar="HOST:PORT[;HOST:PORT]",
                       help="name server address(es) (default $NAMESRV_ADDR or 127.0.0.1:9876)")
        return p

    p = with_namesrv(sub.add_parser("produce", help="send messages: --body N times, or one per stdin line"))
    p.add_argument("--topic", required=True)
    p.add_argument("--group", default="broker-cli-producer", help="producer group")
    p.add_argument("--tags")
    p.add_argument("--keys")
    p.add_argument("--prop", action="append", default=[], metavar="KEY=VALUE", help="a user property (repeatable)")
    p.add_argument("--count", type=int, help="times to send --body (default 1; only with --body)")
    p.add_argument("--body", help="the message body (default: one message per line of stdin)")
    p.set_defaults(client_cmd=_produce, usage_error=p.error)

    c = with_namesrv(sub.add_parser("consume", help="consume as a push consumer, one JSON line per message"))
    c.add_argument("--topic", required=True)
    c.add_argument("--group", required=True, help="consumer group")
    c.add_argument("--tags", default="*", help='subscription expression, e.g. "tagA || tagB" (default *)')
    c.add_argument("--count", type=int, help="exit after this many messages")
    c.add_argument("--timeout", type=float, help="exit after this many seconds")
    c.add_argument("--from-first", action="store_true",
                   help="a group with no committed offset starts at the first message, not the end")
    c.set_defaults(client_cmd=_consume)

    a = sub.add_parser("admin", help="topics, routes, consumer offsets, broker status")
    asub = a.add_subparsers(dest="admin_cmd", required=True)
    t = asub.add_parser("topic", help="create, list or show the route of topics")
    tsub = t.add_subparsers(dest="topic_cmd", required=True)
    tc = with_namesrv(tsub.add_parser("create", help="create or update a topic on a broker or every master "
                                                     "(mqadmin updateTopic)"))
    tc.add_argument("-t", "--topic", required=True)
    # -q is ours (updateTopic has no -q and no single count): -r and -w, mqadmin's, set them apart
    tc.add_argument("-q", "--queues", type=int, default=4, metavar="N", help="read and write queues (default 4)")
    tc.add_argument("-r", "--readQueueNums", type=int, metavar="N", help="read queues (default --queues)")
    tc.add_argument("-w", "--writeQueueNums", type=int, metavar="N", help="write queues (default --queues)")
    tc.add_argument("-p", "--perm", type=int, default=6, help="permission: 2 write, 4 read, 6 both (default 6)")
    tc.add_argument("-o", "--order", type=_bool_arg, default=False, metavar="true|false", help="an ordered topic")
    tc.add_argument("-b", "--broker", "--brokerAddr", dest="broker", metavar="HOST:PORT",
                    help="broker address (default: every master, or of -c)")
    tc.add_argument("-c", "--cluster", "--clusterName", dest="cluster", help="every master of this cluster")
    tc.set_defaults(client_cmd=_topic_create)
    with_namesrv(tsub.add_parser("list", help="every topic the name servers know (mqadmin topicList)")
                 ).set_defaults(client_cmd=_topic_list)
    tr = with_namesrv(tsub.add_parser("route", help="a topic's route as JSON (mqadmin topicRoute)"))
    tr.add_argument("-t", "--topic", required=True)
    tr.set_defaults(client_cmd=_topic_route)
    o = with_namesrv(asub.add_parser("offsets", help="a group's committed offset, max offset and lag per queue "
                                                     "(mqadmin consumerProgress)"))
    o.add_argument("-g", "--group", "--groupName", dest="group", required=True)
    o.add_argument("-t", "--topic", "--topicName", dest="topic", required=True)
    o.set_defaults(client_cmd=_offsets)
    s = with_namesrv(asub.add_parser("status", help="runtime info of a broker or of every master "
                                                    "(mqadmin brokerStatus)"))
    s.add_argument("-b", "--broker", "--brokerAddr", dest="broker", metavar="HOST:PORT",
                   help="broker address (default: every master)")
    s.add_argument("-c", "--cluster", "--clusterName", dest="cluster", help="every master of this cluster")
    s.set_defaults(client_cmd=_status)
    cu = with_namesrv(asub.add_parser("cluster", help="cluster info as JSON (mqadmin clusterList)"))
    cu.add_argument("-c", "--cluster", "--clusterName", dest="cluster", help="only this cluster")
    cu.set_defaults(client_cmd=_cluster)
    cl = with_namesrv(asub.add_parser("clean", help="delete expired commit-log files now "
                                                    "(mqadmin deleteExpiredCommitLog)"))
    cl.add_argument("-b", "--broker", "--brokerAddr", dest="broker", metavar="HOST:PORT",
                    help="broker address (default: every master)")
    cl.add_argument("-c", "--cluster", dest="cluster", help="every master of this cluster")
    cl.set_defaults(client_cmd=_clean)
    q = with_namesrv(asub.add_parser("query", help="messages by key (--key, --topic) or by id (--id: an offsetMsgId, "
                                                   "or a client msgId with --topic), one JSON line each "
                                                   "(mqadmin queryMsgByKey, queryMsgById)"))
    which = q.add_mutually_exclusive_group(required=True)
    which.add_argument("-k", "--key", "--msgKey", dest="key", help="a key the messages were sent with (KEYS)")
    which.add_argument("-i", "--id", "--msgId", dest="id",
                       help="an offsetMsgId, or a client msgId (UNIQ_KEY; needs --topic)")
    q.add_argument("-t", "--topic", help="the messages' topic (needed with --key and for a client msgId)")
    q.add_argument("-b", "--begin", "--beginTimestamp", dest="begin", type=int, default=0, metavar="MS",
                   help="stored at or after (epoch ms; default 0)")
    q.add_argument("-e", "--end", "--endTimestamp", dest="end", type=int, default=LONG_MAX, metavar="MS",
                   help="stored at or before (epoch ms; default: no end)")
    q.add_argument("-m", "--max", "--maxNum", dest="max", type=int, default=32,
                   help="at most this many per broker (default 32; the broker caps it at maxMsgsNumBatch)")
    q.set_defaults(client_cmd=_query)
    sg = with_namesrv(asub.add_parser("updateSubGroup", help="create or update a subscription group (mqadmin "
                                                            "updateSubGroup): FIFO (-o), retries (-r), consumeEnable (-s)"))
    sg.add_argument("-g", "--groupName", required=True, help="consumer group name")
    sg.add_argument("-b", "--brokerAddr", help="broker address (default: every master, or of -c)")
    sg.add_argument("-c", "--clusterName")
    for letter, name, what in (("-s", "consumeEnable", "consume enable"), ("-o", "consumeMessageOrderly", "FIFO group"),
                               ("-m", "consumeFromMinEnable", "from min offset"),
                               ("-d", "consumeBroadcastEnable", "broadcast"),
                               ("-a", "notifyConsumerIdsChanged", "notify consumer ids changed")):
        extra = ("-e",) if name == "consumeEnable" else ()  # -e: an alias of mqadmin's -s
        sg.add_argument(letter, *extra, f"--{name}", type=_bool_arg, metavar="true|false", help=what)
    sg.add_argument("-r", "--retryMaxTimes", type=int, help="retries before the dead-letter queue")
    sg.add_argument("-q", "--retryQueueNums", type=int)
    sg.add_argument("-i", "--brokerId", type=int, help="consume from (0: the master)")
    sg.add_argument("-w", "--whichBrokerWhenConsumeSlowly", type=int)
    sg.set_defaults(client_cmd=_update_sub_group)
    ct = asub.add_parser("controller", help="the controller's view (controller mode): its Raft group and leader, "
                                            "and per broker group the master, epochs and SyncStateSet as JSON "
                                            "(mqadmin getControllerMetaData, getSyncStateSet)")
    ct.add_argument("-a", "--controller", "--controllerAddress", dest="controller", required=True, metavar="HOST:PORT",
                    help="any controller of the group (its controllerDLegerPeers address)")
    ct.add_argument("-b", "--broker-name", "--brokerName", dest="broker_name", action="append", default=None,
                    help="only this broker group (repeatable; default: every group)")
    ct.set_defaults(client_cmd=_controller_view)
    ep = with_namesrv(asub.add_parser("epoch", help="a controller-mode broker's epochs (mqadmin getBrokerEpoch) as "
                                                    "JSON: each master epoch its log holds, where it starts and ends"))
    which = ep.add_mutually_exclusive_group(required=True)
    which.add_argument("--broker", metavar="HOST:PORT", help="the broker's address")
    # mqadmin's -b is a broker name, not an address: its master and slaves, found through -n
    which.add_argument("-b", "--brokerName", help="every replica of this broker group, keyed by address")
    which.add_argument("-c", "--clusterName", help="every replica of every broker group of this cluster")
    ep.set_defaults(client_cmd=_broker_epoch)


def handles(args: argparse.Namespace) -> bool:
    return getattr(args, "client_cmd", None) is not None


def _check(args: argparse.Namespace) -> None:
    """What argparse cannot say alone; a refusal is argparse's (usage, the error, exit status 2)."""
    if args.client_cmd is _produce and args.count is not None:
        if args.body is None:
            args.usage_error("--count needs --body (without --body each line of stdin is one message)")
        if args.count < 1:
            args.usage_error(f"--count {args.count}: at least 1")


def run(args: argparse.Namespace) -> int:
    _check(args)
    logging.basicConfig(level=os.environ.get("BROKER_LOG_LEVEL", "ERROR"),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    try:
        return runner(args.client_cmd(args))
    except ClientError as e:
        print(f"broker {args.cmd}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


# -- produce ---------------------------------------------------------------------------------------
STDIN_PROMPT = "reading message bodies from stdin, one per line; Ctrl-D to end"


def _bodies(args) -> list[bytes]:
    if args.body is not None:
        return [args.body.encode()] * (args.count or 1)
    if sys.stdin.isatty():  # a user at a terminal would otherwise see a command that hangs
        print(STDIN_PROMPT, file=sys.stderr, flush=True)
    return [line.rstrip("\n").encode() for line in sys.stdin]


async def _produce(args) -> int:
    props = {}
    for kv in args.prop:
        k, sep, v = kv.partition("=")
        if not sep:
            raise ClientError(f"--prop {kv!r} is not KEY=VALUE")
        props[k] = v
    # read before connecting: an empty stdin needs no name server to be refused
    bodies = _bodies(args)
    if not bodies:
        print("broker produce: read no lines from stdin; sent nothing", file=sys.stderr)
        return 1
    async with Producer(args.group, args.namesrv) as producer:
        for i in range(0, len(bodies), SEND_WINDOW):
            futs = [producer.send_async(Message(args.topic, b, tags=args.tags, keys=args.keys, properties=dict(props)))
                    for b in bodies[i:i + SEND_WINDOW]]
            for f in futs:  # in order, and the first failure ends the command
                print(await f, flush=True)
    # stdout keeps one SendResult a line (for scripts); the count is for the user
    print(f"sent {len(bodies)} message{'' if len(bodies) == 1 else 's'} to {args.topic}", file=sys.stderr)
    return 0


# -- consume ---------------------------------------------------------------------------------------
def message_json(m: MessageExt) -> str:
    return json.dumps({"topic": m.topic, "queueId": m.queue_id, "queueOffset": m.queue_offset,
                       "msgId": m.uniq_key or m.msg_id, "offsetMsgId": m.msg_id, "tags": m.tags, "keys": m.keys,
                       "reconsumeTimes": m.reconsume_times, "properties": m.properties,
                       "body": bytes(m.body).decode("utf-8", "replace")}, ensure_ascii=False)


async def _consume(args) -> int:
    done = asyncio.Event()
    seen = 0

    async def listener(msgs: list[MessageExt]) -> bool:
        nonlocal seen
        for m in msgs:
            if args.count is not None and seen >= args.count:
                # past --count: left unconsumed (its offset is not committed) for the next consumer
                await asyncio.Future()
            print(message_json(m), flush=True)
            seen += 1
            if args.count is not None and seen >= args.count:
                done.set()
        return True

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, done.set)
    consumer = PushConsumer(args.group, args.namesrv, consume_from_first=args.from_first)
    consumer.subscribe(args.topic, args.tags)
    consumer.register(listener)
    await consumer.start()
    try:
        await asyncio.wait_for(done.wait(), args.timeout)
    except asyncio.TimeoutError:
        pass
    finally:
        await consumer.shutdown()
    if args.count is not None and seen < args.count:
        print(f"broker consume: {seen} of {args.count} messages within {args.timeout:g} s", file=sys.stderr)
        return 1
    return 0


# -- admin -----------------------------------------------------------------------------------------
async def _topic_create(args) -> int:
    read = args.queues if args.readQueueNums is None else args.readQueueNums
    write = args.queues if args.writeQueueNums is None else args.writeQueueNums
    queues = f"{read} queues" if read == write else f"{read} read and {write} write queues"
    async with Admin(args.namesrv) as admin:
        for addr in await admin.create_topic(args.topic, args.queues, args.broker, args.cluster, perm=args.perm,
                                             order=args.order, read_queues=read, write_queues=write):
            print(f"created {args.topic} with {queues} on {addr}")
    return 0


async def _topic_list(args) -> int:
    async with Admin(args.namesrv) as admin:
        for t in await admin.topic_list():
            print(t)
    return 0


async def _topic_route(args) -> int:
    async with Admin(args.namesrv) as admin:
        print(json.dumps((await admin.route(args.topic)).to_json(), indent=2))
    return 0


async def _offsets(args) -> int:
    async with Admin(args.namesrv) as admin:
        rows = await admin.consumer_offsets(args.group, args.topic)
    print(f"{'broker':<20} {'queue':>5} {'committed':>10} {'max':>10} {'lag':>8}")
    for r in sorted(rows, key=lambda r: r.queue):
        print(f"{r.queue.broker_name:<20} {r.queue.queue_id:>5} {r.committed:>10} {r.max_offset:>10} {r.lag:>8}")
    print(f"total lag {sum(r.lag for r in rows)}")
    return 0


async def _brokers(admin: Admin, args) -> list[str]:
    """--broker, or every master of --cluster, or every master the name servers know."""
    addrs = [args.broker] if args.broker else await admin.master_addrs(args.cluster)
    if not addrs:
        raise ClientError(f"no broker{' of cluster ' + args.cluster if args.cluster else ''} registered with "
                          f"{args.namesrv}")
    return addrs


async def _status(args) -> int:
    async with Admin(args.namesrv) as admin:
        for addr in await _brokers(admin, args):
            table = await admin.broker_status(addr)
            width = max(map(len, table), default=0)
            print(addr)
            for k, v in sorted(table.items()):
                print(f"  {k:<{width}}  {v}")
    return 0


async def _clean(args) -> int:
    async with Admin(args.namesrv) as admin:
        for addr in await _brokers(admin, args):
            await admin.delete_expired(addr)
            print(f"{addr}: expired files are being deleted")
    return 0


async def _query(args) -> int:
    if args.key is not None and not args.topic:
        raise ClientError("--key needs --topic")
    async with Admin(args.namesrv) as admin:
        if args.key is not None:
            msgs = await admin.query_message(args.topic, args.key, args.max, args.begin, args.end)
        else:
            msgs = await admin.message_by_id(args.id, args.topic)
    for m in msgs:
        print(message_json(m), flush=True)
    if not msgs:
        print(f"broker admin: no message {'with key ' + args.key if args.key is not None else args.id}"
              f"{' in ' + args.topic if args.topic else ''}", file=sys.stderr)
        return 1
    return 0


def _bool_arg(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"{text!r} is not true or false")
    return text.lower() == "true"


_SUB_GROUP_FIELDS = {"consumeEnable": "consumeEnable", "consumeMessageOrderly": "consumeMessageOrderly",
                     "consumeFromMinEnable": "consumeFromMinEnable", "consumeBroadcastEnable": "consumeBroadcastEnable",
                     "notifyConsumerIdsChanged": "notifyConsumerIdsChangedEnable", "retryMaxTimes": "retryMaxTimes",
                     "retryQueueNums": "retryQueueNums", "brokerId": "brokerId",
                     "whichBrokerWhenConsumeSlowly": "whichBrokerWhenConsumeSlowly"}


async def _update_sub_group(args) -> int:
    fields = {key: getattr(args, opt) for opt, key in _SUB_GROUP_FIELDS.items() if getattr(args, opt) is not None}
    async with Admin(args.namesrv) as admin:
        for addr in await admin.update_sub_group(args.groupName, args.brokerAddr, args.clusterName, **fields):
            cfg = await admin.sub_group(addr, args.groupName)
            print(f"create subscription group to {addr} success.\n{json.dumps(cfg)}")
    return 0


async def _controller_call(addr: str, code: int, body: bytes = b"", what: str = "the controller"):
    from broker.remoting.command import RemotingCommand
    from broker.remoting.connection import connect
    host, _, port = addr.rpartition(":")
    try:
        conn = await asyncio.wait_for(connect(host, int(port)), 5)
    except (OSError, ValueError, asyncio.TimeoutError) as e:
        raise ClientError(f"cannot reach {what} at {addr}: {e or type(e).__name__}") from None
    try:
        return await conn.request(RemotingCommand.request(code, {}, body), 10)
    except (OSError, asyncio.TimeoutError) as e:
        raise ClientError(f"no answer from {what} at {addr}: {e or type(e).__name__}") from None
    finally:
        conn.close()


async def _controller_view(args) -> int:
    """Metadata from the controller named, the replicas table from its leader (only the leader
    answers it: it reads the state after the last committed event)."""
    from broker.controller import codes as ccodes
    meta = await _controller_call(args.controller, ccodes.CONTROLLER_GET_METADATA_INFO)
    if meta.code != ccodes.SUCCESS:
        raise ClientError(f"the controller at {args.controller} answered code {meta.code}: {meta.remark}")
    info = dict(meta.ext)
    leader = info.get("controllerLeaderAddress")
    if not leader:
        raise ClientError(f"the controller group of {args.controller} has no leader now (an election is under way?)")
    body = json.dumps(args.broker_name).encode() if args.broker_name else b""
    r = await _controller_call(leader, ccodes.CONTROLLER_GET_SYNC_STATE_DATA, body)
    if r.code != ccodes.SUCCESS:
        raise ClientError(f"the controller leader at {leader} answered code {r.code}: {r.remark}")
    table = json.loads(bytes(r.body))["replicasInfoTable"]
    print(json.dumps({"controller": {k: info[k] for k in sorted(info)}, "replicasInfoTable": table}, indent=2))
    return 0


async def _epoch_cache(addr: str) -> dict:
    from broker.remoting.controller_codes import GET_BROKER_EPOCH_CACHE, SUCCESS
    r = await _controller_call(addr, GET_BROKER_EPOCH_CACHE, what="the broker")
    if r.code != SUCCESS:
        raise ClientError(f"the broker at {addr} answered code {r.code}: {r.remark} (is it in controller mode?)")
    return json.loads(bytes(r.body))


async def _broker_epoch(args) -> int:
    if args.broker:
        print(json.dumps(await _epoch_cache(args.broker), indent=2))
        return 0
    async with Admin(args.namesrv) as admin:
        info = await admin.cluster_info()
    names = info.get("clusterAddrTable", {}).get(args.clusterName, []) if args.clusterName else [args.brokerName]
    addrs = sorted(a for n in names for a in ((info.get("brokerAddrTable", {}).get(n) or {}).get("brokerAddrs") or {})
                   .values())
    if not addrs:
        which = f"cluster {args.clusterName}" if args.clusterName else f"broker {args.brokerName}"
        raise ClientError(f"no {which} registered with {args.namesrv}")
    print(json.dumps({addr: await _epoch_cache(addr) for addr in addrs}, indent=2))
    return 0


async def _cluster(args) -> int:
    async with Admin(args.namesrv) as admin:
        info = await admin.cluster_info()
    if args.cluster:
        names = info.get("clusterAddrTable", {}).get(args.cluster)
        if names is None:
            raise ClientError(f"no cluster {args.cluster} registered with {args.namesrv}")
        info = {"brokerAddrTable": {n: b for n, b in info.get("brokerAddrTable", {}).items() if n in names},
                "clusterAddrTable": {args.cluster: names}}
    print(json.dumps(info, indent=2))
    return 0
