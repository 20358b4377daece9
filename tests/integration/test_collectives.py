"""Collectives between devices of different workers on a real cluster (2 workers x 4 devices),
checked against numpy: every collective JAX's shard_map emits on a 2x4 mesh, replica groups
that cross and interleave the workers (all_reduce, all_gather, collective_broadcast), pmap's
psum, and a data-parallel MLP trained with chained launches whose losses match a one-device
run."""
import numpy as np

from dist import EXAMPLES, PROGRAMS, loom_run, probe


def test_psum_example(cluster, tmp_path):
    r, _ = loom_run(cluster.addr, EXAMPLES / "distributed_psum.mlir", "--input", f"0={EXAMPLES / 'arange8.npy'}")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "[140 140 140 140 140 140 140 140]\n"
    x = np.arange(8, dtype=np.float32) * 1.5
    r, res = loom_run(cluster.addr, PROGRAMS / "pmap_psum_8.mlir", inputs=[x], tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(res[0], np.full(8, x.sum(), np.float32))


def test_shard_map_collectives_on_a_2x4_mesh(cluster, tmp_path):
    rng = np.random.default_rng(3)
    a = rng.integers(-50, 50, (8, 16)).astype(np.float32)  # integers: sums are exact in any order
    n = rng.integers(-1000, 1000, (3, 8)).astype(np.int32)
    r, res = loom_run(cluster.addr, PROGRAMS / "colls_2x4.mlir", inputs=[a, n], tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    assert len(res) == 10, len(res)  # the program's ten results
    blocks = a.reshape(2, 4, 4, 4)  # [i (x), r, j (y), c]
    psum_y = blocks.sum(axis=2).reshape(8, 4)
    np.testing.assert_array_equal(res[0], psum_y)                                   # psum over y
    np.testing.assert_array_equal(res[1], blocks.sum(axis=(0, 2)))                  # psum over x, y
    np.testing.assert_array_equal(res[2], a)                                        # all_gather over y
    np.testing.assert_array_equal(res[3], psum_y)                                   # psum_scatter over y
    np.testing.assert_array_equal(res[4], a)                                        # all_to_all over y
    np.testing.assert_array_equal(res[5], np.roll(a.reshape(8, 4, 4), 1, axis=1).reshape(8, 16))  # ppermute
    np.testing.assert_array_equal(res[6], np.maximum(a[:4], a[4:]))                 # pmax over x
    np.testing.assert_array_equal(res[7], n.min(axis=1, keepdims=True))            # pmin over x, y
    nb = n.reshape(3, 2, 4)  # device (i, j) holds column 4 i + j
    np.testing.assert_array_equal(res[8], np.concatenate([nb.sum(axis=1)] * 2, axis=1))  # psum over x
    np.testing.assert_array_equal(res[9], np.array([0, 1, 2, 3, 10, 11, 12, 13], np.int32))  # axis_index
    # the same launch again gives bitwise the same results
    r2, res2 = loom_run(cluster.addr, PROGRAMS / "colls_2x4.mlir", inputs=[a, n], tmp=tmp_path)
    assert r2.returncode == 0, r2.stderr
    assert len(res2) == len(res), (len(res2), len(res))
    for x, y in zip(res, res2):
        assert x.tobytes() == y.tobytes()


def test_replica_groups_across_workers(cluster, tmp_path):
    a = np.arange(32, dtype=np.float32).reshape(8, 4) * 0.25
    r, res = loom_run(cluster.addr, PROGRAMS / "replica_colls_8.mlir", inputs=[a], tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    for rep in range(8):
        g = [0, 2, 4, 6] if rep % 2 == 0 else [1, 3, 5, 7]
        np.testing.assert_array_equal(res[0][rep], a[g].sum(axis=0))
        g = [0, 5, 2, 7] if rep in (0, 5, 2, 7) else [4, 1, 6, 3]
        np.testing.assert_array_equal(res[1][rep], a[g].reshape(16))
        np.testing.assert_array_equal(res[2][rep], a[3] if rep < 4 else a[7])
    np.testing.assert_array_equal(res[3], np.arange(8, dtype=np.uint32))


def test_data_parallel_mlp_training_matches_one_device(cluster, tmp_path):
    d = np.load(PROGRAMS / "mlp_data.npz")
    files = []
    for name in ["w1", "b1", "w2", "b2", "x", "y"]:
        f = tmp_path / f"{name}.bin"
        d[name].astype(np.float32).tofile(f)
        files.append(f)
    steps = len(d["losses"])
    out = probe("loop", cluster.addr, PROGRAMS / "mlp_dp_step_8.mlir", steps, 4, 4, *files, timeout=240)
    losses = [float(line.split()[2]) for line in out.splitlines() if line.startswith("loss ")]
    assert len(losses) == steps, out
    print(out)
    assert losses[-1] < losses[0] / 4  # it learns
    np.testing.assert_allclose(losses, d["losses"], rtol=2e-4, atol=1e-5)
