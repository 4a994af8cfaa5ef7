"""The official 5.x Python client (PyPI `rocketmq-python-client` 5.1.2, in .venv-rocketmq5, unmodified)
as a load driver, for bench.grpc_bench's `grpc_py5_*_local` cells (issue 32: "the official 5.x
Python client's own throughput is printed too; where the client itself is the bound, say so with
its CPU"). Runs under .venv-rocketmq5's Python: it imports nothing of the broker.

    python py5_driver.py send '<json>'      Producer.send_async, `in_flight` sends outstanding
    python py5_driver.py receive '<json>'   SimpleConsumer: `threads` threads, each receive(32) then
                                            ack() of each message, as the client's docs show it

Options: endpoints, topic, seconds (the clock), warmup (seconds before it), body (bytes), in_flight,
group, threads, invisible (s). Prints {"start": true} when the clock starts, then one JSON line:
msgs, seconds, errors, p50/p99 latency (µs: a send's, or a receive call's), the process's CPU
seconds over the clock (every thread: the client's gRPC threads and its own pools included)."""
import json
import os
import sys
import threading
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer


def _out(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _pct(lat: list, q: float) -> float:
    if not lat:
        return float("nan")
    lat = sorted(lat)
    return lat[min(len(lat) - 1, int(q * len(lat)))] / 1000


def _config(opt) -> ClientConfiguration:
    return ClientConfiguration(opt["endpoints"], Credentials("", ""), request_timeout=10)


def send(opt) -> None:
    producer = Producer(_config(opt), (opt["topic"],))
    producer.startup()
    body = os.urandom(opt.get("body", 1024))
    slots = threading.BoundedSemaphore(opt.get("in_flight", 64))
    state = {"ok": 0, "errors": 0, "counting": False}
    lat: list = []
    lock = threading.Lock()

    def done(fut, t0) -> None:
        ok = fut.exception() is None
        with lock:
            if state["counting"]:
                if ok:
                    state["ok"] += 1
                    lat.append(time.perf_counter_ns() - t0)
                else:
                    state["errors"] += 1
        slots.release()

    def run(seconds: float) -> None:
        stop = time.perf_counter() + seconds
        while time.perf_counter() < stop:
            slots.acquire()
            msg = Message()
            msg.topic = opt["topic"]
            msg.body = body
            msg.tag = "bench"
            t0 = time.perf_counter_ns()
            try:
                fut = producer.send_async(msg)
            except Exception:  # noqa: BLE001 - counted; the clock goes on
                slots.release()
                with lock:
                    state["errors"] += state["counting"]
                continue
            fut.add_done_callback(lambda f, t0=t0: done(f, t0))

    try:
        run(opt.get("warmup", 1.0))
        with lock:
            state["counting"] = True
        _out({"start": True})
        c0, t0 = time.process_time(), time.perf_counter()
        run(opt["seconds"])
        dt = time.perf_counter() - t0
        for _ in range(opt.get("in_flight", 64)):  # the sends still out answered (counted if OK)
            slots.acquire(timeout=10)
        cpu = time.process_time() - c0
        with lock:
            state["counting"] = False
            _out({"msgs": state["ok"], "seconds": dt, "errors": state["errors"], "p50_us": _pct(lat, 0.5),
                  "p99_us": _pct(lat, 0.99), "cpu_s": cpu})
    finally:
        producer.shutdown()


def receive(opt) -> None:
    consumer = SimpleConsumer(_config(opt), opt["group"], {opt["topic"]: FilterExpression("*")}, await_duration=1)
    consumer.startup()
    invisible = opt.get("invisible", 30)
    state = {"msgs": 0, "errors": 0, "counting": False, "stop": 0.0}
    lat: list = []
    lock = threading.Lock()

    def worker() -> None:
        while time.perf_counter() < state["stop"]:
            t0 = time.perf_counter_ns()
            try:
                msgs = consumer.receive(32, invisible)
                took = time.perf_counter_ns() - t0
                for m in msgs:
                    consumer.ack(m)
            except Exception:  # noqa: BLE001 - counted; the clock goes on
                with lock:
                    state["errors"] += state["counting"]
                continue
            with lock:
                if state["counting"]:
                    state["msgs"] += len(msgs)
                    lat.append(took)

    def run(seconds: float) -> None:
        state["stop"] = time.perf_counter() + seconds
        threads = [threading.Thread(target=worker, daemon=True) for _ in range(opt.get("threads", 8))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    try:
        run(opt.get("warmup", 1.0))
        state["counting"] = True
        _out({"start": True})
        c0, t0 = time.process_time(), time.perf_counter()
        run(opt["seconds"])
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        _out({"msgs": state["msgs"], "seconds": dt, "errors": state["errors"], "p50_us": _pct(lat, 0.5),
              "p99_us": _pct(lat, 0.99), "cpu_s": cpu})
    finally:
        consumer.shutdown()


if __name__ == "__main__":
    cmd, opt = sys.argv[1], json.loads(sys.argv[2])
    {"send": send, "receive": receive}[cmd](opt)
