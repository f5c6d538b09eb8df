#!/usr/bin/env python3
"""What meter subscriptions cost the daemon, and whether they make it late:
N websocket clients subscribe to meters at an interval for T seconds, against
the same daemon with none for a baseline. Reports the daemon's CPU (all its
threads, and per thread, from /proc), its late periods, underruns and
overruns over each window, the meter updates per second that every client
received, and the machine's load average beside them.

Self-contained, on a private JACK dummy server (jackd -n NAME -d dummy) with
a daemon of its own (the soak: 100 clients for 10 minutes):

  bench/meter_clients.py --jack [--tapstream build/daemon/tapstream] [--clients 100]
      [--interval-ms 50] [--seconds 600] [--baseline-seconds 30] [--latency buffered|zero]
      [--taps 1024] [--jack-realtime] [--check]

Or against a daemon already running:

  bench/meter_clients.py --port 8790 --pid PID [--token T] [--clients 10] [--seconds 30]

--check exits 1 when a late period, underrun or overrun was counted, a client
was cut off, or a client received under 90 % of the updates it asked for.
Prints and saves JSON under bench/results/ (commit, machine, date)."""
import argparse
import contextlib
import importlib.util
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import tempfile
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
spec = importlib.util.spec_from_file_location("client", os.path.join(root, "tools", "tapstream-ws.py"))
client = importlib.util.module_from_spec(spec)
spec.loader.exec_module(client)
xrun_counters = ("late_periods", "underruns", "overruns", "late_frames", "lost_frames")


def cpu_seconds(stat_file):
    fields = open(stat_file).read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu_seconds(pid):
    threads = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            threads[tid] = cpu_seconds(f"/proc/{pid}/task/{tid}/stat")
    return threads


def measure(args, clients, seconds):
    url = f"ws://127.0.0.1:{args.port}/ws"
    stop = threading.Event()
    received = [0] * clients
    cut_off = [False] * clients
    sockets = []
    for _ in range(clients):
        ws = client.WebSocket(url, args.token)
        ws.request({"request": "subscribe_meters", "interval_ms": args.interval_ms})
        sockets.append(ws)

    def reader(i):
        while not stop.is_set():
            try:
                sockets[i].receive()
                received[i] += 1
            except Exception:
                cut_off[i] = not stop.is_set()
                return

    threads = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    def stats():
        # A fresh connection per sample: one held idle for minutes is closed by the
        # server's ping timeout, which is the server's job, not a failure.
        probe = client.WebSocket(url, args.token)
        try:
            return probe.request({"request": "get_stats"})["result"]
        finally:
            probe.sock.close()

    time.sleep(min(2.0, seconds / 10))  # every subscription under way
    load_before = os.getloadavg()
    before = stats()
    counts0 = list(received)
    cpu0, threads0, t0 = cpu_seconds(f"/proc/{args.pid}/stat"), thread_cpu_seconds(args.pid), time.monotonic()
    series = []
    while (left := t0 + seconds - time.monotonic()) > 0:
        time.sleep(min(10.0, left))
        now = stats()
        series.append({"t": round(time.monotonic() - t0, 1),
                       "clients_receiving": sum(1 for c in cut_off if not c),
                       **{k: now.get(k, 0) - before.get(k, 0) for k in ("blocks",) + xrun_counters}})
    cpu1, threads1, t1 = cpu_seconds(f"/proc/{args.pid}/stat"), thread_cpu_seconds(args.pid), time.monotonic()
    counts1 = list(received)
    after = stats()
    load_after = os.getloadavg()
    stop.set()
    for ws in sockets:
        ws.sock.close()
    elapsed = t1 - t0
    rates = [(b - a) / elapsed for a, b in zip(counts0, counts1)]
    return {
        "clients": clients,
        "seconds": elapsed,
        "cpu_percent_of_one_core": 100 * (cpu1 - cpu0) / elapsed,
        "thread_cpu_percent": {tid: 100 * (threads1[tid] - threads0[tid]) / elapsed
                               for tid in threads1 if tid in threads0},
        "meter_events_per_second": sum(rates),
        "per_client_updates_per_second": {
            "min": min(rates), "median": statistics.median(rates), "max": max(rates),
            "each": [round(r, 3) for r in rates],
        } if rates else None,
        "clients_cut_off": sum(cut_off),
        "blocks": after["blocks"] - before["blocks"],
        # Against rate / period: fewer when the (dummy) device itself was held up.
        "blocks_per_second": (after["blocks"] - before["blocks"]) / elapsed,
        **{k: after.get(k, 0) - before.get(k, 0) for k in xrun_counters},
        "totals_at_end": {k: after.get(k, 0) for k in xrun_counters},
        "load_average_1_5_15": {"before": load_before, "after": load_after},
        "every_10_s_since_start": series,
    }


def wait_for(predicate, seconds, what):
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)


@contextlib.contextmanager
def private_daemon(args):
    """jackd's dummy driver under a private name and `tapstream run` on it."""
    work = tempfile.mkdtemp(prefix="tapstream-meters-")
    server = f"tapstream-meters-{os.getpid()}"
    env = dict(os.environ, JACK_DEFAULT_SERVER=server, JACK_NO_AUDIO_RESERVATION="1")
    jackd = subprocess.Popen(
        ["jackd", "-n", server, "-S", "--realtime" if args.jack_realtime else "--no-realtime",
         "-t", "10000", "-d", "dummy", "-r", str(args.rate), "-p", str(args.period),
         "-C", str(args.channels), "-P", str(args.channels)],
        env=env, stdout=open(f"{work}/jackd.out", "w"), stderr=subprocess.STDOUT)
    daemon = None
    try:
        subprocess.run(["jack_wait", "-s", server, "-w", "-t", "10"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        rng = random.Random(args.seed)
        with open(f"{work}/taps.txt", "w") as f:
            f.write("".join(f"{rng.uniform(-1, 1) / args.taps:.9g}\n" for _ in range(args.taps)))
        with open(f"{work}/live.toml", "w") as f:
            f.write(f"sample_rate = {args.rate}\nblock_frames = {args.period}\n"
                    f"channels = {args.channels}\nlatency = \"{args.latency}\"\n"
                    f"ring_margin_frames = {args.margin}\n"
                    "[input]\ndevice = \"system\"\n[output]\ndevice = \"system\"\n"
                    f"[filter]\nfile = \"taps.txt\"\nmax_taps = {args.taps}\nwatch = false\n"
                    "[engine]\nbackend = \"cpu\"\n[control]\nsocket = \"\"\n"
                    f"[web]\nport = {args.port}\n")
        daemon = subprocess.Popen([args.tapstream, "run", "--config", f"{work}/live.toml"], env=env,
                                  stdout=open(f"{work}/daemon.out", "w"),
                                  stderr=open(f"{work}/daemon.err", "w"))
        wait_for(lambda: daemon.poll() is not None or "web: http" in open(f"{work}/daemon.out").read(),
                 30, "the daemon's websocket")
        if daemon.poll() is not None:
            raise RuntimeError("the daemon exited: " + open(f"{work}/daemon.err").read())
        args.pid = daemon.pid
        yield work
        args.jackd_xrun_lines = sum("xrun" in line.lower() for line in open(f"{work}/jackd.out"))
        daemon.send_signal(signal.SIGTERM)
        status = daemon.wait(15)
        if status != 128 + signal.SIGTERM and status != -signal.SIGTERM:
            raise RuntimeError(f"the daemon exited {status} after SIGTERM: "
                               + open(f"{work}/daemon.err").read())
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        jackd.terminate()
        jackd.wait(10)
        if args.keep:
            print(f"kept {work}")
        else:
            subprocess.run(["rm", "-rf", work])


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jack", action="store_true", help="start jackd's dummy driver and a daemon")
    parser.add_argument("--tapstream", default=os.path.join(root, "build", "daemon", "tapstream"))
    parser.add_argument("--port", type=int, help="the daemon's web port (default with --jack: a free one)")
    parser.add_argument("--pid", type=int, help="the daemon's process (not with --jack)")
    parser.add_argument("--token")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--interval-ms", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--baseline-seconds", type=float, help="without clients (default: --seconds, at most 60)")
    parser.add_argument("--latency", choices=["buffered", "zero"], default="buffered")
    parser.add_argument("--rate", type=int, default=48000)
    parser.add_argument("--period", type=int, default=256)
    parser.add_argument("--channels", type=int, default=2)
    parser.add_argument("--margin", type=int, default=1024, help="ring_margin_frames (buffered)")
    parser.add_argument("--taps", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--jack-realtime", action="store_true", help="jackd --realtime (needs the privilege)")
    parser.add_argument("--keep", action="store_true", help="keep the daemon's directory and logs")
    parser.add_argument("--check", action="store_true", help="exit 1 unless clean (see above)")
    args = parser.parse_args()
    if args.baseline_seconds is None:
        args.baseline_seconds = min(args.seconds, 60)
    if not args.jack and (args.port is None or args.pid is None):
        parser.error("give --jack, or --port and --pid of a running daemon")
    if args.jack and args.port is None:
        args.port = free_port()

    with private_daemon(args) if args.jack else contextlib.nullcontext():
        baseline = measure(args, 0, args.baseline_seconds)
        loaded = measure(args, args.clients, args.seconds)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=here).stdout.strip()
    # The server thread is the one whose CPU grew with the clients.
    growth = {tid: loaded["thread_cpu_percent"][tid] - baseline["thread_cpu_percent"].get(tid, 0.0)
              for tid in loaded["thread_cpu_percent"]}
    web_thread = max(growth, key=growth.get) if growth else None
    result = {
        "bench": "meter_clients", "commit": commit, "machine": platform.node(),
        "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "setup": {"jack_dummy": args.jack, "latency": args.latency, "rate": args.rate,
                  "period": args.period, "channels": args.channels, "taps": args.taps,
                  "margin": args.margin, "jack_realtime": args.jack_realtime,
                  "jackd_xrun_lines": args.jackd_xrun_lines} if args.jack else "attached",
        "interval_ms": args.interval_ms, "seconds": args.seconds,
        "baseline": baseline, "subscribed": loaded,
        "meter_cost_percent_of_one_core": loaded["cpu_percent_of_one_core"] - baseline["cpu_percent_of_one_core"],
        "server_thread_percent_of_one_core": {
            "baseline": baseline["thread_cpu_percent"].get(web_thread, 0.0),
            "subscribed": loaded["thread_cpu_percent"].get(web_thread, 0.0)} if web_thread else None,
    }
    print(json.dumps(result, indent=2))
    os.makedirs(os.path.join(here, "results"), exist_ok=True)
    kind = "jack-" if args.jack else ""
    name = f"meter_clients-{kind}{args.clients}x{args.interval_ms}ms-{args.seconds:g}s-{commit}.json"
    with open(os.path.join(here, "results", name), "w") as out:
        json.dump(result, out, indent=2)
    print(f"saved bench/results/{name}")
    s = loaded
    asked = 1000.0 / args.interval_ms
    print(f"{args.clients} clients x {s['seconds']:.0f} s at {asked:g}/s: late periods {s['late_periods']}, "
          f"underruns {s['underruns']}, overruns {s['overruns']}, cut off {s['clients_cut_off']}, "
          f"blocks/s {s['blocks_per_second']:.1f} of {args.rate / args.period:.1f}; "
          f"updates/s per client min {s['per_client_updates_per_second']['min']:.2f} "
          f"median {s['per_client_updates_per_second']['median']:.2f}; daemon CPU "
          f"{baseline['cpu_percent_of_one_core']:.2f} % -> {s['cpu_percent_of_one_core']:.2f} % of one core "
          f"(server thread {result['server_thread_percent_of_one_core']['subscribed']:.2f} %); "
          f"load average {s['load_average_1_5_15']['before'][0]:.2f} -> {s['load_average_1_5_15']['after'][0]:.2f}"
          if args.clients else "no clients")
    if args.check:
        bad = [k for k in ("late_periods", "underruns", "overruns") if s[k] or baseline[k]]
        if s["clients_cut_off"]:
            bad.append("clients cut off")
        if args.clients and s["per_client_updates_per_second"]["min"] < 0.9 * asked:
            bad.append("a client received under 90 % of its updates")
        if bad:
            print("meter_clients: FAILED:", ", ".join(bad))
            raise SystemExit(1)


if __name__ == "__main__":
    main()
