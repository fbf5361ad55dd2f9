"""The sharded table's exchanges across real "hosts" (network namespaces, MPICH over TCP): the node-aware
exchange and the hot rows (auto's rule, and a number) give the flat exchange's model bit for bit, auto
keeps the flat exchange on 2 hosts, and a checkpoint written with one resumes with the other (same ranks:
bitwise; on 2 hosts of 1 rank: re-sharded, within the order of the sums; replicated: within 1e-12)."""
import os

import numpy as np
import pytest

from conftest import mpiexec_path
from scripts.lab import netns

# 2^12 hashed columns, 5400 training rows, global batch 256: 22 steps per epoch
BASE = ["-m", "mpinn.train", "--default-rows", "6000", "--hash-bits", "12", "--hidden", "16", "--batch-size", "256",
        "--dtype", "float64", "--no-progress", "--optimizer", "adam", "--epochs", "1", "--table", "sharded",
        "--ensemble", "1"]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    reason = netns.skip_reason(mpiexec_path())
    if reason:
        pytest.skip(reason)
    netns.remove_stale()
    c = netns.Cluster(2, str(tmp_path_factory.mktemp("shards")), mpiexec_path())
    try:
        c.up()
        yield c
    finally:
        c.down()


def train(lab, name, per_host, args):
    out = os.path.join(lab.out_dir, name + ".npz")
    before = lab.counters()
    job = lab.mpich(2 * per_host, BASE + args + ["--model-out", out], lab.hostfile("two-nodes.mpich", per_host),
                    limit_s=120, name=name)
    rc = job.wait(120)
    assert rc == 0, job.stdout + job.stderr
    after = lab.counters()
    crossed = sum(after[h][1] - before[h][1] for h in lab.hosts)
    with np.load(out) as z:
        return z["params"], job.stdout, crossed


@pytest.mark.mpi
def test_node_exchange_and_hot_rows_across_hosts_give_the_flat_model(lab):
    ck = os.path.join(lab.out_dir, "ck")
    flat, out, _ = train(lab, "flat", 2, ["--shard-exchange", "flat", "--hot-rows", "off",
                                          "--checkpoint-dir", ck, "--checkpoint-every", "9"])
    assert "flat exchange (asked for); no hot rows (--hot-rows off)" in out, out
    ck2 = os.path.join(lab.out_dir, "ck2")
    node, out, crossed = train(lab, "node", 2, ["--shard-exchange", "node", "--hot-rows", "auto",
                                                "--checkpoint-dir", ck2, "--checkpoint-every", "9"])
    # on 2 hosts of 2 ranks: the node exchange summing each host's gradient rows (the flat bits), and auto's hot rows
    assert "node exchange (asked for; gradient rows summed in the node)" in out and "hot rows on every rank (--hot-rows auto: counted" in out, out
    assert "no hot rows" not in out, out
    assert np.array_equal(node, flat), np.abs(node - flat).max()
    assert crossed > 1 << 16, crossed           # rows and gradient rows went over eth0
    node_only, out, _ = train(lab, "node-only", 2, ["--shard-exchange", "node"])
    assert "node exchange (asked for; gradient rows summed in the node); no hot rows (--hot-rows off)" in out, out
    assert np.array_equal(node_only, flat), np.abs(node_only - flat).max()
    flat_hot, out, _ = train(lab, "auto-40", 2, ["--hot-rows", "40"])
    # auto below 4 nodes: the flat exchange
    assert "flat exchange (auto: 2 nodes, under 4); 40 hot rows" in out, out
    assert np.array_equal(flat_hot, flat), np.abs(flat_hot - flat).max()

    # the checkpoint at step 18 of the flat run (written without hot rows), resumed with both
    at22 = [f for f in os.listdir(ck) if f.endswith("-000000022.npz")]
    os.remove(os.path.join(ck, at22[0]))
    same, out, _ = train(lab, "resume-node", 2, ["--resume", ck, "--shard-exchange", "node", "--hot-rows", "30",
                                                 "--checkpoint-dir", os.path.join(lab.out_dir, "b")])
    assert "epoch 1, step 18" in out and "node exchange (asked for; gradient rows summed in the node); 30 hot rows" in out, out
    assert np.array_equal(same, flat), np.abs(same - flat).max()
    fewer, out, _ = train(lab, "resume-2", 1, ["--resume", ck, "--shard-exchange", "node", "--hot-rows", "25",
                                               "--checkpoint-dir", os.path.join(lab.out_dir, "c")])
    assert "epoch 1, step 18" in out, out
    assert "flat exchange (--shard-exchange node with one rank per node is the flat exchange); 25 hot rows" in out, out
    assert np.max(np.abs(fewer - flat)) < 1e-10, np.max(np.abs(fewer - flat))

    # the node + hot rows run's checkpoint at step 18 (the hot rows' state gathered from their owners),
    # resumed with the table replicated: the same model (the replicated exchange sums in rank order too)
    os.remove(os.path.join(ck2, [f for f in os.listdir(ck2) if f.endswith("-000000022.npz")][0]))
    rep, out, _ = train(lab, "resume-replicated", 2, ["--resume", ck2, "--table", "replicated",
                                                      "--checkpoint-dir", os.path.join(lab.out_dir, "d")])
    assert "epoch 1, step 18" in out and "table replicated" in out, out
    assert np.max(np.abs(rep - flat)) < 1e-12, np.max(np.abs(rep - flat))
