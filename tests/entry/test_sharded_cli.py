"""--table sharded end to end: checkpoints hold the whole table, a resume at the same rank count is bitwise,
on another rank count (or replicated) it re-shards and goes on; predict needs only the model file."""
import json
import os

import numpy as np
import pytest

from conftest import mpirun, run
import sys

# 2^12 hashed columns, 5400 training rows, global batch 256: 22 steps per epoch
BASE = ["-m", "mpinn.train", "--default-rows", "6000", "--hash-bits", "12", "--hidden", "16", "--batch-size", "256",
        "--dtype", "float64", "--no-progress", "--optimizer", "adam", "--epochs", "1", "--ensemble", "1"]


def params(path):
    with np.load(path, allow_pickle=False) as z:
        return z["params"]


@pytest.mark.mpi
def test_checkpoint_on_3_ranks_resumes_on_3_bitwise_and_on_2_resharded(tmp_path, launcher):
    ck, out = tmp_path / "ck", str(tmp_path / "%s.npz")
    r = mpirun(3, BASE + ["--table", "sharded", "--checkpoint-dir", str(ck), "--checkpoint-every", "9",
                          "--model-out", out % "a"], timeout=120)
    assert r.returncode == 0, r.stderr
    assert "hashed table sharded by rows over 3 ranks (asked for)" in r.stdout
    (at18,) = [f for f in ck.iterdir() if f.name.endswith("-000000018.npz")]
    (at22,) = [f for f in ck.iterdir() if f.name.endswith("-000000022.npz")]
    with np.load(at18) as z:      # whole arrays, gathered from the 3 ranks' rows
        assert z["params"].shape == params(out % "a").shape and z["opt_m_scaled"].shape == z["params"].shape
        assert z["opt_t_row"].shape == (1 << 12,) and np.count_nonzero(z["params"][:(1 << 12) * 16]) > 60000
    os.remove(at22)                                    # back to step 18, mid-epoch
    runs = {"b": (3, "sharded"), "c": (2, "sharded"), "e": (2, "replicated")}
    for name, (n, table) in runs.items():
        r = mpirun(n, BASE + ["--table", table, "--resume", str(ck), "--checkpoint-dir", str(tmp_path / name),
                              "--model-out", out % name, "--metrics-out", str(tmp_path / (name + ".json"))],
                   timeout=120)
        assert r.returncode == 0, r.stderr
        assert "epoch 1, step 18" in r.stdout
    a = params(out % "a")
    assert np.array_equal(params(out % "b"), a)                             # same rank count: bitwise
    assert np.max(np.abs(params(out % "c") - a)) < 1e-10                    # 2 ranks: the sums' order only
    assert np.max(np.abs(params(out % "e") - params(out % "c"))) < 1e-12    # the same on a replicated table
    reported = json.load(open(tmp_path / "c.json"))["valid"]
    p = run([sys.executable, "-m", "mpinn.predict", "--model", out % "c", "--metrics-out", str(tmp_path / "p.json")])
    assert p.returncode == 0, p.stderr
    again = json.load(open(tmp_path / "p.json"))
    for k in ("accuracy", "auc", "logloss"):
        assert again[k] == pytest.approx(reported[k], abs=1e-9)


@pytest.mark.mpi
def test_a_sharded_table_kept_at_an_earlier_best_epoch_is_the_replicated_ones(tmp_path, launcher):
    """With --keep best (the default) a sharded run hands rank 0's copy of the best epoch to the model file
    without gathering the table again; the file equals the replicated run's, bit for bit."""
    args = ["-m", "mpinn.train", "--default-rows", "5000", "--epochs", "6", "--optimizer", "adam", "--lr", "0.02",
            "--no-progress"]
    lines = {}
    for table in ("sharded", "replicated"):
        r = mpirun(2, args + ["--table", table, "--model-out", str(tmp_path / (table + ".npz"))], timeout=180)
        assert r.returncode == 0, r.stderr[-3000:]
        lines[table] = [x for x in r.stdout.splitlines() if x.startswith("model written")][0]
    assert "the parameters of epoch 1 " in lines["sharded"]          # an earlier epoch than the last (6)
    assert np.array_equal(params(tmp_path / "sharded.npz"), params(tmp_path / "replicated.npz"))


@pytest.mark.mpi
@pytest.mark.parametrize("option", [["--shard-exchange", "node"], ["--hot-rows", "100"]])
def test_a_sharded_tables_options_on_a_table_auto_kept_replicated_are_refused(tmp_path, launcher, option):
    """On one node --table auto keeps the table replicated: an explicit --shard-exchange node or --hot-rows K
    would do nothing, so it is one line and exit 2 (auto's own --hot-rows auto is no error)."""
    out = tmp_path / "never.npz"
    r = mpirun(2, ["-m", "mpinn.train", "--default-rows", "2000", "--epochs", "1", "--model-out", str(out)] + option,
               timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [x for x in (r.stdout + r.stderr).splitlines() if "error" in x]
    assert lines and "this run's table is replicated" in lines[0] and "give --table sharded" in lines[0], lines
    assert not out.exists()
