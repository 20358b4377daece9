"""Bytes moved by collectives per launch: Loom's partitioner beside XLA's SPMD partitioner, on the
annotated global programs of tests/integration/programs/partition/ (jax.jit with NamedSharding on
8 CPU devices). Loom's figure is `loom compile --explain`'s total; XLA's is counted from the
partitioned HLO of `jax.jit(...).lower(...).compile()` with the same formula (bytes each device
receives: (n-1)/n of the gathered result for all-gather, of the local input for reduce-scatter
and all-to-all, 2 (n-1)/n of the buffer for all-reduce, the buffer for collective-permute; times
the number of devices). Collectives inside loops count once on both sides. No timing.

    python3 bench/bench_partition.py [--loom build/bin/loom]
"""
import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
ROOT = Path(__file__).resolve().parents[1]
PART = ROOT / "tests" / "integration" / "programs" / "partition"

ESIZE = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "s32": 4, "u32": 4, "s64": 8, "pred": 1, "s8": 1, "u8": 1}
COLL = re.compile(r" = (.*?) (all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)(?:-start)?\(")


def shape_bytes(s):
    total = 0
    for dt, dims in re.findall(r"([a-z0-9]+)\[([0-9,]*)\]", s):
        n = 1
        for d in filter(None, dims.split(",")):
            n *= int(d)
        total += n * ESIZE.get(dt, 4)
    return total


def group_size(line, ndev):
    m = re.search(r"replica_groups=mesh\[([^\]]*)\][^{]*\{([^}]*)\}", line)
    if m:
        sizes = dict((k.strip("'"), int(v)) for k, v in re.findall(r"('[^']*')=(\d+)", m.group(1)))
        n = 1
        for ax in re.findall(r"'[^']*'", m.group(2)):
            n *= sizes.get(ax.strip("'"), 1)
        return n
    m = re.search(r"replica_groups=\[(\d+),(\d+)\]<=", line)
    if m:
        return int(m.group(2))
    m = re.search(r"replica_groups=\{\{([0-9,]*)\}", line)
    if m:
        return len(m.group(1).split(","))
    return ndev


def xla_bytes(hlo, ndev=8):
    total, count = 0.0, 0
    for line in hlo.splitlines():
        m = COLL.search(line)
        if not m:
            continue
        b, kind = shape_bytes(m.group(1)), m.group(2)
        n = group_size(line, ndev)
        count += 1
        if kind == "all-reduce":
            per = 2 * b * (n - 1) / n
        elif kind == "all-gather":
            per = b * (n - 1) / n
        elif kind == "reduce-scatter":
            per = b * (n - 1)
        elif kind == "all-to-all":
            per = b * (n - 1) / n
        else:
            per = b
        total += per * ndev
    return count, total


def loom_bytes(loom, path):
    r = subprocess.run([loom, "compile", "--explain", str(path)], capture_output=True, text=True, check=True)
    m = re.search(r"total: (\d+) collectives moving (\d+) bytes per launch, (\d+) fallbacks", r.stdout)
    return int(m.group(1)), float(m.group(2)), int(m.group(3))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loom", default=str(ROOT / "build" / "bin" / "loom"))
    a = ap.parse_args()
    spec = importlib.util.spec_from_file_location("partition_gen", PART / "gen.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.WRITE = False
    gen.main()
    print(f"{'program':24s} {'XLA colls':>9s} {'XLA bytes':>11s} {'Loom colls':>10s} {'Loom bytes':>11s} "
          f"{'Loom/XLA':>8s} {'fallbacks':>9s}")
    tx = tl = 0.0
    for name, f, mesh, ins, in_specs, out_specs in gen.CASES:
        hlo = gen.lowering(f, mesh, ins, in_specs, out_specs).compile().as_text()
        xc, xb = xla_bytes(hlo)
        lc, lb, fb = loom_bytes(a.loom, PART / f"{name}.mlir")
        tx += xb
        tl += lb
        ratio = f"{lb / xb:8.2f}" if xb else ("    =" if lb == 0 else "     inf")
        print(f"{name:24s} {xc:9d} {xb:11.0f} {lc:10d} {lb:11.0f} {ratio} {fb:9d}")
    print(f"{'total':24s} {'':9s} {tx:11.0f} {'':10s} {tl:11.0f} {tl / tx:8.2f}")


if __name__ == "__main__":
    sys.exit(main())
