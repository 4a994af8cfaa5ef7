"""Controller-mode set-ups: a name server, three controllers (`broker controller`) and brokers of one
group with `enableControllerMode=true`, real processes on loopback with free ports. With
`proxied=True` every link of broker i (to each controller, and its slave's HA link to it) goes
through a Proxy of its own, so `isolate(i)` cuts broker i off the controllers and the other
brokers while clients and the name server still reach it.

With `hosts` (tests/helpers/netns.Hosts with hosts "ns", "cn0".. "cn2" and one per broker name
b0, b1...) every process runs in a network namespace of its own, at its host's address, and the
faults are the hosts' packet drops."""
from __future__ import annotations

from pathlib import Path

from tests.conftest import wait_for
from tests.helpers.controller_group import ControllerGroup
from tests.helpers.ha_cluster import Broker, NameServer, Proxy, runtime

# short intervals, all at or below RocketMQ's defaults: a killed master is seen at once (its
# heartbeat connection closes), a silent one after 1.5 s
FAST_BROKER = ("brokerHeartbeatInterval=200\ncontrollerHeartBeatTimeoutMills=1500\nsyncBrokerMetadataPeriod=1000\n"
               "checkSyncStateSetPeriod=500\nhaMaxTimeSlaveNotCatchup=3000\nhaSendHeartbeatInterval=500\n"
               "haHousekeepingInterval=3000\n")
FAST_CONTROLLER = "scanInactiveMasterInterval=500\n"


class ControllerModeGroup:
    def __init__(self, root: Path, n: int = 2, extra: str = "", proxied: bool = False, controller_extra: str = "",
                 hosts=None):
        assert not (proxied and hosts), "proxies on loopback or hosts of their own, not both"
        self.root = root
        placed = (lambda h: {"host": hosts.addr[h], "wrap": hosts.wrap(h)}) if hosts else (lambda h: {})
        self.namesrv = NameServer(root, **placed("ns"))
        self.controllers = ControllerGroup(root, FAST_CONTROLLER + controller_extra, hosts=hosts)
        self.names = [f"b{i}" for i in range(n)]
        self.proxies: dict[str, list[Proxy]] = {name: [] for name in self.names}
        self.brokers: dict[str, Broker] = {}
        for name in self.names:
            addrs = [(self.controllers.addrs[i], p) for i, p in self.controllers.ports.items()]
            if proxied:
                px = [Proxy(p) for _, p in addrs]
                self.proxies[name] += px
                addrs = [("127.0.0.1", p.port) for p in px]
            ctl = ";".join(f"{h}:{p}" for h, p in addrs)
            b = Broker(root, name, self.namesrv.addr, "ASYNC_MASTER", 0,
                       f"enableControllerMode=true\ncontrollerAddr={ctl}\n{FAST_BROKER}{extra}", **placed(name))
            self.brokers[name] = b
        if proxied:
            # a slave reaches broker i's HA port through a proxy of i's, the address i announces
            for name, b in self.brokers.items():
                px = Proxy(b.ha_port)
                self.proxies[name].append(px)
                with b.conf.open("a") as f:
                    f.write(f"haAnnounceAddress=127.0.0.1:{px.port}\n")

    def start(self) -> "ControllerModeGroup":
        self.controllers.start()
        for b in self.brokers.values():
            b.start()
        return self

    def stop(self) -> None:
        for b in self.brokers.values():
            try:
                b.stop()
            except Exception:
                b.kill9()
        self.controllers.stop()
        self.namesrv.stop()
        for px in self.proxies.values():
            for p in px:
                p.close()

    def isolate(self, name: str) -> None:
        for p in self.proxies[name]:
            p.cut()

    def heal(self) -> None:
        for px in self.proxies.values():
            for p in px:
                p.heal()

    @staticmethod
    def role(b: Broker) -> dict:
        try:
            return runtime(b.port, b.host)
        except Exception:
            return {}

    def master(self, timeout: float = 60, exclude: Broker | None = None) -> Broker:
        """The broker serving as master, once exactly one does and the name server routes to it."""
        def find():
            ms = [b for b in self.brokers.values() if b is not exclude and b.child is not None
                  and b.child.proc.poll() is None and self.role(b).get("controllerRole") == "master"]
            if len(ms) != 1:
                return None
            route = self.namesrv.route("TBW102") or {}
            addrs = {int(k): v for d in route.get("brokerDatas", []) for k, v in d["brokerAddrs"].items()}
            return ms[0] if addrs.get(0) == ms[0].addr else None
        return wait_for(find, timeout, "one master, routed by the name server")

    def wait_in_sync(self, master: Broker, n: int, timeout: float = 60) -> None:
        wait_for(lambda: len([x for x in str(self.role(master).get("syncStateSet", "")).split(",") if x]) >= n,
                 timeout, f"{n} members in the SyncStateSet")
