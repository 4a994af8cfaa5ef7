"""RocketMQ 5.1's rocketmq_rpc_latency (RemotingMetricsManager): how long the broker took to answer
each remoting request, from its arrival to its answer, in milliseconds, by request code, response
code, long polling and result, with RocketMQ's buckets and label values (the RequestCode and
ResponseCode field names in lower case, or the number for one without a name).

Requests the Python path answers are timed one by one (BrokerController.handle). Sends the C send
path answers are timed per read or loop turn and per parked batch (FastSendPath): replies written
at the end of their read count as answered within it, a batch parked until durable (SYNC_FLUSH, SYNC_MASTER, DLedger)
as the time it waited; both are labelled send_message_v2, the request the clients send."""
from __future__ import annotations

import bisect
import os

from broker.remoting import codes

BUCKETS_MS = (1, 3, 5, 7, 10, 100, 1000, 2000, 3000)
ONEWAY, SUCCESS = "oneway", "success"


def _code_names() -> tuple[dict[int, str], dict[int, str]]:
    """broker.remoting.codes' request and response codes by number, lower-cased as RemotingHelper's
    maps. The module lists the requests, then the responses after its "# -- responses" line."""
    requests: dict[int, str] = {}
    responses: dict[int, str] = {}
    target = requests
    with open(os.path.join(os.path.dirname(codes.__file__), "codes.py"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("# -- responses"):
                target = responses
            elif line.startswith("# -- header flag"):
                break
            name, eq, _ = line.partition(" = ")
            if eq and name.isupper() and isinstance(getattr(codes, name, None), int):
                target.setdefault(getattr(codes, name), name.lower())
    return requests, responses


REQUEST_NAMES, RESPONSE_NAMES = _code_names()


class RpcLatency:
    """The histogram's series: labels -> [count per bucket (the last: over 3 s), sum of ms]."""

    def __init__(self) -> None:
        self.series: dict[tuple[str, str, bool, str], list] = {}
        # (request code, response code, long polling, result) -> its series' row: the names looked
        # up and the label tuple made once per series, not once per request
        self._rows: dict[tuple, list] = {}

    def record(self, request_code: int, response_code: int | None, elapsed_ns: int, long_polling: bool = False,
               result: str = SUCCESS, n: int = 1) -> None:
        row = self._rows.get((request_code, response_code, long_polling, result))
        if row is None:
            row = self._row(request_code, response_code, long_polling, result)
        ms = elapsed_ns // 1_000_000  # whole milliseconds, as RocketMQ's Stopwatch.elapsed(MILLISECONDS)
        row[bisect.bisect_left(BUCKETS_MS, ms) if ms else 0] += n  # (0 ms: the first bucket, le 1)
        row[-1] += ms * n

    def _row(self, request_code: int, response_code: int | None, long_polling: bool, result: str) -> list:
        key = (REQUEST_NAMES.get(request_code) or str(request_code),
               "" if response_code is None else RESPONSE_NAMES.get(response_code) or str(response_code),
               long_polling, result)
        row = self.series.get(key)
        if row is None:
            row = self.series[key] = [0] * (len(BUCKETS_MS) + 2)
        if len(self._rows) < 10_000:  # codes come from requests: remembered up to a bound
            self._rows[(request_code, response_code, long_polling, result)] = row
        return row

    def rows(self):
        """(request, response, long polling, result, cumulative [(le, count)], sum) per series."""
        for (req, resp, lp, result), row in sorted(self.series.items()):
            acc, cumulative = 0, []
            for bound, count in zip([*BUCKETS_MS, None], row[:-1]):
                acc += count
                cumulative.append(("+Inf" if bound is None else f"{bound:.1f}", acc))
            yield req, resp, lp, result, cumulative, float(row[-1])
