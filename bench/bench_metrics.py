"""Launch latency with the controller's observability off, with metrics on (the HTTP port served
and scraped once a second, as Prometheus would, only faster), and with a trace recording, in one
run: three clusters (a controller and 2 workers x 4 devices each) started side by side, measured
in turns so that drift on a shared machine hits all three alike.

Each measurement is build/bench/bench_dispatch (libloom from C) on an 8-device launch that
chains (tests/integration/programs/add_one_8.mlir): issue = client time per launch issued
without waiting; chain = wall time per launch until the last of N completed; rtt = one launch
then wait, p50/p99. Medians over the rounds, microseconds per launch.

    python3 bench/bench_metrics.py [N] [--rounds R]     (default N=2000 launches, R=6 rounds)
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("LOOM_BUILD_DIR", ROOT / "build"))
LOOM = BUILD / "bin" / "loom"
DISPATCH = BUILD / "bench" / "bench_dispatch"
PROGRAM = ROOT / "tests" / "integration" / "programs" / "add_one_8.mlir"


def wait_file(path, proc, what, timeout=30):
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"bench_metrics: {what} did not start")
        time.sleep(0.02)
    return path.read_text().strip()


class Cluster:
    def __init__(self, name, tmp, http):
        self.name, self.procs, self.http = name, [], None
        d = Path(tmp) / name
        d.mkdir()
        args = [LOOM, "controller", "--listen", "127.0.0.1:0", "--address-file", d / "addr"]
        if http:
            args += ["--http", "127.0.0.1:0", "--http-address-file", d / "http"]
        log = open(d / "controller.log", "w")
        self.procs.append(subprocess.Popen(list(map(str, args)), stderr=log, stdout=log))
        self.addr = wait_file(d / "addr", self.procs[0], "the controller")
        if http:
            self.http = wait_file(d / "http", self.procs[0], "the HTTP port")
        for i in range(2):
            wl = open(d / f"worker{i}.log", "w")
            self.procs.append(subprocess.Popen([str(LOOM), "worker", "--controller", self.addr, "--devices", "4"],
                                               stderr=wl, stdout=wl))
        deadline = time.monotonic() + 30
        while True:
            r = subprocess.run([str(LOOM), "devices", "--controller", self.addr], capture_output=True, text=True)
            if "(8 healthy)" in r.stdout:
                break
            if time.monotonic() > deadline:
                sys.exit(f"bench_metrics: the {name} cluster's devices did not register")
            time.sleep(0.1)

    def post(self, path):
        req = urllib.request.Request(f"http://{self.http}{path}", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read()

    def stop(self):
        for p in reversed(self.procs):
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def scraper(clusters, stop):
    """GET /metrics of each cluster serving it, once a second, until stop is set."""
    while not stop.wait(1.0):
        for c in clusters:
            if c.http:
                with urllib.request.urlopen(f"http://{c.http}/metrics", timeout=10) as r:
                    r.read()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("n", nargs="?", type=int, default=2000, help="launches per measurement (default 2000)")
    ap.add_argument("--rounds", type=int, default=6, help="measurements of each configuration (default 6)")
    a = ap.parse_args()
    for f in (LOOM, DISPATCH):
        if not f.exists():
            sys.exit(f"bench_metrics: {f} is missing: run `make build` first")
    tmp = tempfile.mkdtemp(prefix="loom-bench-metrics-")
    clusters = []
    stop = threading.Event()
    try:
        clusters = [Cluster("off", tmp, False), Cluster("metrics", tmp, True), Cluster("metrics+trace", tmp, True)]
        clusters[2].post("/trace/start")
        t = threading.Thread(target=scraper, args=(clusters, stop), daemon=True)
        t.start()
        rows = {c.name: [] for c in clusters}
        for rnd in range(a.rounds):
            for c in clusters[rnd % 3:] + clusters[:rnd % 3]:  # each goes first in turn (order effects)
                r = subprocess.run([str(DISPATCH), str(PROGRAM), str(a.n)], capture_output=True, text=True,
                                   env={**os.environ, "LOOM_CONTROLLER": c.addr}, check=True)
                rows[c.name].append(json.loads(r.stdout))
        stop.set()
        trace = json.loads(clusters[2].post("/trace/stop"))
        keys = ["issue_us", "chain_us", "rtt_p50_us", "rtt_p99_us"]
        print(f"8-device launch (add_one_8.mlir, 2 workers x 4 devices), {a.n} launches per measurement, "
              f"median of {a.rounds} rounds; microseconds per launch")
        print(f"{'controller':16}" + "".join(f"{k[:-3]:>12}" for k in keys) + f"{'rtt vs off':>12}")
        base = statistics.median(r["rtt_p50_us"] for r in rows["off"])
        for c in clusters:
            med = {k: statistics.median(r[k] for r in rows[c.name]) for k in keys}
            print(f"{c.name:16}" + "".join(f"{med[k]:12.1f}" for k in keys) +
                  f"{(med['rtt_p50_us'] / base - 1) * 100:+11.1f}%")
        print(f"(the trace recorded {trace['metadata']['launches']} launches, "
              f"{trace['metadata']['dropped_launches']} dropped; /metrics scraped once a second)")
    finally:
        stop.set()
        for c in clusters:
            c.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
