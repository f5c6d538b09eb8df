#!/usr/bin/env python3
"""What meter subscriptions cost the daemon: CPU time of `tapstream run` (all
its threads, from /proc) with N websocket clients subscribed to meters at an
interval, against the same daemon with none, and the underruns meanwhile.

  bench/meter_clients.py --port 8790 --pid PID [--clients 10] [--interval-ms 50] [--seconds 30]

Prints and saves JSON under bench/results/ (commit, machine, date)."""
import argparse
import importlib.util
import json
import os
import platform
import subprocess
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("client", os.path.join(here, "..", "tools", "tapstream-ws.py"))
client = importlib.util.module_from_spec(spec)
spec.loader.exec_module(client)


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(args, clients):
    stop = threading.Event()
    received = [0] * clients
    sockets = []
    for _ in range(clients):
        ws = client.WebSocket(f"ws://127.0.0.1:{args.port}/ws", args.token)
        ws.request({"request": "subscribe_meters", "interval_ms": args.interval_ms})
        sockets.append(ws)

    def reader(i):
        while not stop.is_set():
            try:
                sockets[i].receive()
                received[i] += 1
            except Exception:
                return

    threads = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    probe = client.WebSocket(f"ws://127.0.0.1:{args.port}/ws", args.token)
    before = probe.request({"request": "get_stats"})["result"]
    cpu0, t0 = cpu_seconds(args.pid), time.monotonic()
    time.sleep(args.seconds)
    cpu1, t1 = cpu_seconds(args.pid), time.monotonic()
    after = probe.request({"request": "get_stats"})["result"]
    stop.set()
    for ws in sockets:
        ws.sock.close()
    return {
        "clients": clients,
        "cpu_percent_of_one_core": 100 * (cpu1 - cpu0) / (t1 - t0),
        "meter_events_per_second": sum(received) / (t1 - t0),
        "underruns": after["underruns"] - before["underruns"],
        "overruns": after["overruns"] - before["overruns"],
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--token")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--interval-ms", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30)
    args = parser.parse_args()
    baseline = measure(args, 0)
    loaded = measure(args, args.clients)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=here).stdout.strip()
    result = {
        "bench": "meter_clients", "commit": commit, "machine": platform.node(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "interval_ms": args.interval_ms, "seconds": args.seconds,
        "baseline": baseline, "subscribed": loaded,
        "meter_cost_percent_of_one_core": loaded["cpu_percent_of_one_core"] - baseline["cpu_percent_of_one_core"],
    }
    print(json.dumps(result, indent=2))
    os.makedirs(os.path.join(here, "results"), exist_ok=True)
    name = f"meter_clients-{args.clients}x{args.interval_ms}ms-{commit}.json"
    with open(os.path.join(here, "results", name), "w") as out:
        json.dump(result, out, indent=2)


if __name__ == "__main__":
    main()
