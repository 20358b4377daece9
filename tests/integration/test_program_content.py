"""Programs are content-addressed (SHA-256 of the text): a worker is sent a text once, and loading
the same text again (for another device list, so another executable) reuses what loading it made,
without the text and without parsing; a worker that dropped a text it was sent (its cache is one
byte here) answers NOT_FOUND and the controller sends the text again. Results stay right."""
import os

import numpy as np

from conftest import Cluster, run_loom, wait_for

PROG = """module @p{k} {{
  func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {{
    %c = stablehlo.constant dense<{k}.0> : tensor<4xf32>
    %0 = stablehlo.add %a, %c : tensor<4xf32>
    return %0 : tensor<4xf32>
  }}
}}
"""


def _run(c, tmp_path, k, device):
    path = tmp_path / f"p{k}.mlir"
    path.write_text(PROG.format(k=k))
    out = tmp_path / f"out{k}_{device}"
    run_loom("run", str(path), "--input", f"0={tmp_path / 'x.npy'}", "--devices", str(device), "--output-dir", str(out),
             "--controller", c.addr, check=True)
    return np.load(out / "result_0.npy")


def test_same_text_is_sent_and_parsed_once(procs, tmp_path):
    c = Cluster(procs, tmp_path)
    env = {**os.environ, "LOOM_LOG_LEVEL": "debug"}
    c.start_controller()
    w = procs.start(["worker", "--controller", c.addr, "--devices", "2"], "worker0", env=env)
    c.workers.append(w)
    c.wait_devices(2)
    x = np.arange(4, dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    assert np.array_equal(_run(c, tmp_path, 3, 0), x + 3)
    assert np.array_equal(_run(c, tmp_path, 3, 1), x + 3)  # another executable of the same text
    log = procs.log(w)
    assert "from the code of program" in log, log[-3000:]


def test_dropped_text_is_sent_again(procs, tmp_path):
    c = Cluster(procs, tmp_path)
    ctl_log = {**os.environ, "LOOM_LOG_LEVEL": "debug"}
    addr_file = tmp_path / "controller.addr"
    c.controller = procs.start(["controller", "--listen", "127.0.0.1:0", "--address-file", str(addr_file)], "controller",
                               env=ctl_log)
    c.addr = wait_for(lambda: addr_file.exists() and addr_file.read_text().strip(), 30, what="the controller")
    env = {**os.environ, "LOOM_WORKER_TEXT_CACHE": "1"}  # keeps only the newest text
    c.workers.append(procs.start(["worker", "--controller", c.addr, "--devices", "2"], "worker0", env=env))
    c.wait_devices(2)
    x = np.arange(4, dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    assert np.array_equal(_run(c, tmp_path, 0, 1), x)
    for k in range(1, 18):  # more idle programs than the controller keeps loaded: program 0 is unloaded
        assert np.array_equal(_run(c, tmp_path, k, 1), x + k)
    assert np.array_equal(_run(c, tmp_path, 0, 0), x)  # text 0: sent before, dropped since, sent again
    assert "no longer holds the text" in procs.log(c.controller)
