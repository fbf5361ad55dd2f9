"""--device gpu end to end on the command line: train, predict, checkpoint, kill then exact resume, a NaN step
skipped, np 1, 2 and 3 sharing one GPU, the timeline's host waits. Each test runs on the CPU here (its
reference half: the same commands with --device cpu, which must hold too) and on a GPU where cupy finds one
(marked gpu, skipped otherwise)."""
import json
import os
import re
import sys

import numpy as np
import pytest

from conftest import mpirun, run
from mpinn.device.backend import gpu_probe

GPUS, NO_GPU = gpu_probe()
DEVICES = [pytest.param("cpu"),
           pytest.param("gpu", marks=[pytest.mark.gpu, pytest.mark.skipif(not GPUS, reason="needs cupy and a GPU: %s"
                                                                          % NO_GPU)])]
BASE = ["-m", "mpinn.train", "--default-rows", "6000", "--hidden", "16", "--no-progress", "--dtype", "float64",
        "--epochs", "2"]


def train(n, device, tmp_path, *args, env=None, timeout=300):
    return mpirun(n, BASE + ["--device", device] + list(args), timeout, env=env, cwd=str(tmp_path))


def params(path):
    with np.load(path) as z:
        return z["params"]


@pytest.mark.mpi
@pytest.mark.parametrize("device", DEVICES)
def test_train_predict_kill_and_resume_exactly(tmp_path, device, launcher):
    """Trained on the device, the model file predicts on the host what training reported; a run killed (kill -9
    of rank 0) after its step-12 checkpoint and resumed ends bit for bit where the uninterrupted run ends."""
    r = train(1, device, tmp_path, "--model-out", "ref.npz", "--metrics-out", "ref.json")
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("device: gpu 0 (" if device == "gpu" else "device: cpu"), first
    if device == "gpu":        # device: gpu 0 (NVIDIA H200, cupy 14.2.0), gpu 0 of 1 (local rank 0 mod 1); ...
        assert "gpu 0 of 1 (local rank 0 mod 1)" in first, first
        assert first.endswith("gradients stay on the GPU (one rank: nothing to exchange)"), first
    reported = json.load(open(tmp_path / "ref.json"))["valid"]
    p = run([sys.executable, "-m", "mpinn.predict", "--model", "ref.npz", "--metrics-out", "p.json"],
            cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr
    again = json.load(open(tmp_path / "p.json"))
    for k in ("accuracy", "auc", "logloss"):
        assert again[k] == pytest.approx(reported[k], abs=1e-9), k

    r = train(1, device, tmp_path, "--model-out", "never.npz", "--checkpoint-dir", "ck", "--checkpoint-every", "6",
              env={"MPINN_FAULT": "kill:0:15"})
    assert r.returncode != 0 and not (tmp_path / "never.npz").exists()
    assert sorted(os.listdir(tmp_path / "ck"))[-1].endswith("-000000012.npz"), os.listdir(tmp_path / "ck")
    r = train(1, device, tmp_path, "--model-out", "resumed.npz", "--resume", "ck")
    assert r.returncode == 0 and "resumed from" in r.stdout, r.stderr
    assert np.array_equal(params(tmp_path / "resumed.npz"), params(tmp_path / "ref.npz"))


@pytest.mark.mpi
@pytest.mark.parametrize("device", DEVICES)
def test_a_nan_step_is_skipped_on_every_rank(tmp_path, device, launcher):
    r = train(2, device, tmp_path, "--model-out", "m.npz", "--metrics-out", "m.json", env={"MPINN_FAULT": "nan:1:3"})
    assert r.returncode == 0, r.stderr
    assert "step 3 skipped: non-finite loss or gradient (1 in a row, 1 in all)" in r.stdout, r.stdout
    assert json.load(open(tmp_path / "m.json"))["summary"]["skipped_steps"] == 1
    assert np.isfinite(params(tmp_path / "m.npz")).all()


@pytest.mark.mpi
@pytest.mark.parametrize("device", DEVICES)
def test_one_two_and_three_ranks_share_the_machine_and_agree(tmp_path, device, launcher):
    """np 1, 2, 3 (on a one-GPU machine: all on its GPU; --comm auto: none, then staged or CUDA-aware) give the
    same model to rounding (the same global batches), and the time split and trace say where the time went, with
    at most 4 host waits a step, every one the backend sees (docs/gpu.md): the compact rows' count, the verdict read
    with the loss, and at np 2 and 3 the exchange's copies to the host (the rows and the dense part)."""
    out = {}
    for n in (1, 2, 3):
        r = train(n, device, tmp_path, "--model-out", "m%d.npz" % n, "--metrics-out", "m%d.json" % n,
                  "--timeline", "t%d.json" % n)
        assert r.returncode == 0, r.stderr
        out[n] = params(tmp_path / ("m%d.npz" % n))
        events = [e for e in json.load(open(tmp_path / ("t%d.json" % n)))["traceEvents"] if e["ph"] == "X"]
        per_step = {}
        for e in events:
            key = (e["pid"], e["args"]["step"])
            per_step[key] = per_step.get(key, 0) + e["args"]["host_syncs"]
        waits = [v for (_, step), v in per_step.items() if step > 1]
        assert max(waits) <= (2 if n == 1 else 4) if device == "gpu" else max(waits) == 0, per_step
        split = re.search(r"time split \(mean over ranks\): (.*)", r.stdout).group(1)
        assert "compute" in split and "communication" in split
    for n in (2, 3):
        assert np.max(np.abs(out[n] - out[1])) < 1e-9, n


def test_the_sharded_table_is_refused_on_a_gpu(tmp_path):
    """--table sharded has not been written for GPU buffers: one line, exit 2, before anything is probed."""
    r = run([sys.executable] + BASE + ["--device", "gpu", "--table", "sharded", "--model-out", "m.npz"],
            cwd=str(tmp_path))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("mpinn: error: --table sharded") and "--device gpu" in r.stderr, r.stderr
    assert not (tmp_path / "m.npz").exists()


def day_files(folder, days=3, rows=2500, seed=0):
    """A table in day files, as a warehouse exports it: two numbers, an integer id, a text category, a 0/1 label."""
    rng = np.random.default_rng(seed)
    os.makedirs(folder)
    for d in range(days):
        x, z = rng.normal(size=rows), rng.exponential(size=rows)
        ids, cat = rng.integers(1000, 9000, size=rows), rng.choice(["red", "green", "blue", "grey"], size=rows)
        logit = np.sin(3 * x) + 0.5 * z - 1 + (ids % 7 == 0) + (cat == "red")
        y = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(int)
        with open(os.path.join(folder, "day-%02d.csv" % d), "w") as f:
            f.write("x,z,user_id,colour,clicked\n")
            f.writelines("%.5f,%.5f,%d,%s,%d\n" % row for row in zip(x, z, ids, cat, y))


@pytest.mark.mpi
@pytest.mark.parametrize("device", DEVICES)
def test_day_files_streamed_with_bins_embeddings_and_an_ensemble_train_as_on_the_cpu(tmp_path, device, launcher):
    """This round's paths on the device: a directory of day files streamed by every rank (--readers all), numeric
    bins, periodic embeddings and a 2-member ensemble, at np 2. The model equals the CPU's to rounding (float64),
    and predict on the host scores a day file with it."""
    day_files(str(tmp_path / "days"))
    args = ["-m", "mpinn.train", "--data", "days", "--label", "clicked", "--stream", "on", "--sample-rows", "3000",
            "--readers", "all", "--numeric-bins", "8", "--numeric-embedding", "periodic", "--ensemble", "2",
            "--epochs", "2", "--hidden", "16", "--dtype", "float64", "--no-progress"]
    models = {}
    for dev in sorted({device, "cpu"}):
        r = mpirun(2, args + ["--device", dev, "--model-out", dev + ".npz", "--metrics-out", dev + ".json"], 300,
                   cwd=str(tmp_path))
        assert r.returncode == 0, r.stderr[-3000:]
        assert r.stdout.startswith("device: gpu 0 (" if dev == "gpu" else "device: cpu"), r.stdout[:300]
        models[dev] = params(tmp_path / (dev + ".npz"))
    assert models[device].shape == models["cpu"].shape
    assert np.max(np.abs(models[device] - models["cpu"])) < 1e-7
    reported = json.load(open(tmp_path / (device + ".json")))["valid"]
    p = run([sys.executable, "-m", "mpinn.predict", "--model", device + ".npz", "--data", "days/day-02.csv",
             "--out", "p.csv", "--metrics-out", "p.json"], cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr
    scored = json.load(open(tmp_path / "p.json"))
    assert 0.6 < scored["auc"] <= 1 and np.isfinite(reported["auc"]), (scored, reported)
