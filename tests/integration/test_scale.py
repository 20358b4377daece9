"""A simulated cluster of 256 workers x 8 devices (`loom worker --simulate`, four processes of 64)
against a real controller with authentication and real clients: every device registers healthy,
sharded puts reach all 256 workers' data ports (with real transfer tokens), launches over all 2048
devices complete (simulated workers execute nothing: results are zeros of the right shape), and a
lost process's 64 workers turn unhealthy while the other 192 stay usable."""
import json
import os
import signal

import numpy as np

from conftest import Auth, Cluster, run_loom, wait_for

WORKERS_PER_PROC, PROCS, DEVICES = 64, 4, 8
TOTAL = WORKERS_PER_PROC * PROCS * DEVICES


def step_program(p):
    """shard_map x -> x + 1 over p devices, one element each."""
    return (f'module @step attributes {{mhlo.num_partitions = {p} : i32, mhlo.num_replicas = 1 : i32}} {{\n'
            f'  sdy.mesh @mesh = <["d"={p}]>\n'
            f'  func.func public @main(%arg0: tensor<{p}xi32>) -> tensor<{p}xi32> {{\n'
            f'    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{{"d"}}]>] '
            f'out_shardings=[<@mesh, [{{"d"}}]>] manual_axes={{"d"}} (%a: tensor<1xi32>) {{\n'
            f'      %c = stablehlo.constant dense<1> : tensor<1xi32>\n'
            f'      %1 = stablehlo.add %a, %c : tensor<1xi32>\n'
            f'      sdy.return %1 : tensor<1xi32>\n'
            f'    }} : (tensor<{p}xi32>) -> tensor<{p}xi32>\n'
            f'    return %0 : tensor<{p}xi32>\n  }}\n}}\n')


def test_simulated_256_workers(procs, tmp_path):
    auth = Auth(tmp_path)
    c = Cluster(procs, tmp_path, auth)
    c.start_controller("--heartbeat-interval", "500", "--heartbeat-timeout", "10000")
    env = {**os.environ, "LOOM_TOKEN": auth.tokens["alice"]}
    sims = [c.start_worker(DEVICES, extra=["--simulate", str(WORKERS_PER_PROC)]) for _ in range(PROCS)]

    def listed():
        r = run_loom("devices", "--json", "--controller", c.addr, env=env, timeout=60)
        if r.returncode != 0:
            return None
        d = json.loads(r.stdout)["devices"]
        return d if len(d) == TOTAL and all(x["healthy"] for x in d) else None

    devs = wait_for(listed, 60, interval=0.2, what=f"{TOTAL} simulated devices")
    assert len({x["worker_id"] for x in devs}) == WORKERS_PER_PROC * PROCS

    # a sharded put over every device: one shard on each of the 2048, through 256 data ports
    x = np.arange(TOTAL, dtype=np.int32)
    np.save(tmp_path / "x.npy", x)
    r = run_loom("array", "put", str(tmp_path / "x.npy"), "--mesh", f"d={TOTAL}", "--spec", "d", "--json",
                 "--controller", c.addr, env=env, timeout=120, check=True)
    put = json.loads(r.stdout)
    assert len(put["shards"]) == TOTAL
    assert len({s["worker_id"] for s in put["shards"]}) == WORKERS_PER_PROC * PROCS

    # launches over all 2048 devices: inputs put, RUN to 256 workers, results fetched back
    (tmp_path / "step.mlir").write_text(step_program(TOTAL))
    out = tmp_path / "out"
    for _ in range(2):
        r = run_loom("run", str(tmp_path / "step.mlir"), "--input", f"0={tmp_path / 'x.npy'}", "--json",
                     "--output-dir", str(out), "--controller", c.addr, env=env, timeout=120, check=True)
        y = np.load(out / "result_0.npy")
        assert y.shape == (TOTAL,) and y.dtype == np.int32
        assert not y.any()  # simulated workers compute nothing: zeros, never a made-up value

    # one process of 64 simulated workers dies: exactly its 512 devices turn unhealthy
    victim = sims[1]
    victim_ids = {x["id"] for x in devs if x["pid"] == victim.pid}
    procs.kill(victim, signal.SIGKILL)

    def lost():
        d = json.loads(run_loom("devices", "--json", "--controller", c.addr, env=env, check=True).stdout)["devices"]
        bad = {x["id"] for x in d if not x["healthy"]}
        return d if bad == victim_ids else None

    d = wait_for(lost, 20, interval=0.2, what="the killed process's devices to turn unhealthy")
    assert len(victim_ids) == WORKERS_PER_PROC * DEVICES
    assert all(x["health_reason"] == "connection closed" for x in d if x["id"] in victim_ids)
    s = json.loads(run_loom("status", "--json", "--controller", c.addr, env=env, check=True).stdout)
    assert sum(w["alive"] for w in s["workers"]) == WORKERS_PER_PROC * (PROCS - 1)

    # a launch that needs a lost device fails with a clear error; one on live devices still runs
    r = run_loom("run", str(tmp_path / "step.mlir"), "--input", f"0={tmp_path / 'x.npy'}", "--controller", c.addr,
                 env=env, timeout=120)
    assert r.returncode != 0 and "lost" in r.stderr, r.stderr
    live = [x["id"] for x in d if x["healthy"]][:1024]
    (tmp_path / "half.mlir").write_text(step_program(1024))
    np.save(tmp_path / "h.npy", np.ones(1024, dtype=np.int32))
    r = run_loom("run", str(tmp_path / "half.mlir"), "--input", f"0={tmp_path / 'h.npy'}", "--devices",
                 ",".join(map(str, live)), "--output-dir", str(out), "--controller", c.addr, env=env, timeout=120,
                 check=True)
    assert np.load(out / "result_0.npy").shape == (1024,)


def test_simulated_data_port_survives_random_frames(procs, tmp_path, monkeypatch):
    """Simulated workers are daemons too: random frames built from the schema at their data ports
    (after a real HELLO) are refused or answered, the process keeps serving, and a launch over
    its devices still completes."""
    from test_wire_fuzz import DATA_TYPES, FRAMES, SEED, Gen, Peer, client_hello, data_address, load_schema

    auth = Auth(tmp_path)
    monkeypatch.setenv("LOOM_TOKEN", auth.tokens["alice"])
    c = Cluster(procs, tmp_path, auth)
    c.start_controller("--frame-timeout", "500", "--handshake-timeout", "1500")
    sim = c.start_worker(2, extra=["--simulate", "2"])
    c.wait_devices(4)
    messages, by_type = load_schema()
    g = Gen(SEED * 7 + 1, messages)
    peers = [Peer(data_address(c.addr), client_hello) for _ in range(2)]
    for i in range(FRAMES):
        g.r.choice(peers).send(g.frame(DATA_TYPES, by_type, allow_payload=True))
        if i % 500 == 499:
            assert sim.poll() is None, "the simulation process died"
    for p in peers:
        p.close()
    assert sim.poll() is None
    (tmp_path / "step.mlir").write_text(step_program(4))
    np.save(tmp_path / "x.npy", np.arange(4, dtype=np.int32))
    r = run_loom("run", str(tmp_path / "step.mlir"), "--input", f"0={tmp_path / 'x.npy'}", "--controller", c.addr,
                 timeout=60, check=True)
    assert r.stdout.strip() == "[0 0 0 0]", r.stdout
