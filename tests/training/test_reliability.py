"""Failure paths under a real mpiexec: kill -9 and exact resume, a hung rank, NaN steps, bad input.
Faults are injected with MPINN_FAULT=kind:rank:step (see mpinn.training.faults.Faults)."""
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import ROOT, mpiexec_path, mpirun
from mpinn.core.errors import STOPPED_EXIT

# small enough that a checkpoint takes milliseconds: 2**12 hashed columns, 5400 training rows,
# global batch 256 -> 22 steps per epoch
BASE = ["-m", "mpinn.train", "--default-rows", "6000", "--hash-bits", "12", "--hidden", "16",
        "--batch-size", "256", "--dtype", "float64", "--no-progress", "--ensemble", "1"]   # one model (a small table)


def train(n, args, env=None, timeout=120):
    return mpirun(n, BASE + list(args), timeout=timeout, env=env)


def params(path):
    with np.load(path, allow_pickle=False) as z:
        return z["params"]


def step_file(ck, step):
    """The checkpoint of step `step` in directory ck (ckpt-<run>-<step>.npz: the one run there)."""
    (name,) = [n for n in os.listdir(ck) if n.endswith("-%09d.npz" % step)]
    return ck / name


def digest(directory):
    """Names and bytes of every file under directory: 'nothing damaged' means this is unchanged."""
    out = {}
    for root, _, files in os.walk(directory):
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, directory)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The reference: 2 epochs on 2 ranks, never interrupted."""
    d = tmp_path_factory.mktemp("ref")
    r = train(2, ["--epochs", "2", "--model-out", str(d / "m.npz"), "--metrics-out", str(d / "m.json")])
    assert r.returncode == 0, r.stderr
    return d


@pytest.mark.mpi
def test_kill_9_ends_the_job_fast_and_resume_is_bitwise_exact(tmp_path, uninterrupted, launcher):
    ck = tmp_path / "ck"
    r = train(2, ["--epochs", "2", "--checkpoint-dir", str(ck), "--checkpoint-every", "4",
                  "--model-out", str(tmp_path / "never.npz")], env={"MPINN_FAULT": "kill:1:31"})
    ended = time.time()
    assert r.returncode != 0
    killed_at = float(re.search(r"MPINN_FAULT: kill at ([0-9.]+)", r.stderr).group(1))
    assert ended - killed_at < 10, "the launcher took %.1f s to end the job" % (ended - killed_at)
    assert not (tmp_path / "never.npz").exists()
    # step 31 was never finished: the newest checkpoint is step 28 (every 4 steps; 22 per epoch)
    assert sorted(os.listdir(ck))[-1].endswith("-000000028.npz"), os.listdir(ck)

    r = train(2, ["--epochs", "2", "--resume", str(ck), "--model-out", str(tmp_path / "m.npz"),
                  "--metrics-out", str(tmp_path / "m.json")])
    assert r.returncode == 0, r.stderr
    assert "resumed from" in r.stdout and "epoch 2, step 6" in r.stdout
    ref = params(uninterrupted / "m.npz")
    got = params(tmp_path / "m.npz")
    assert ref.dtype == np.float64 and np.array_equal(got, ref)            # bitwise
    # the per-epoch history carried over the interruption too
    h_ref = json.load(open(uninterrupted / "m.json"))["history"]
    h_got = json.load(open(tmp_path / "m.json"))["history"]
    assert [e["train_loss"] for e in h_got] == [e["train_loss"] for e in h_ref]
    assert h_got[-1]["valid"] == h_ref[-1]["valid"]


@pytest.mark.mpi
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1], ids=["SIGTERM", "SIGUSR1"])
def test_a_signal_to_the_launcher_checkpoints_stops_and_resumes_exactly(tmp_path, uninterrupted, sig, launcher):
    """What Slurm sends before a time limit (SIGTERM, or SIGUSR1 with sbatch --signal): the ranks agree at a
    step boundary, write a checkpoint, and end with the "stopped, resumable" exit code; --resume ends bit for
    bit where the uninterrupted run ends, and no temporary file is left behind."""
    ck = tmp_path / "ck"
    cmd = [mpiexec_path(), "-n", "2", sys.executable] + BASE + [
        "--epochs", "2", "--checkpoint-dir", str(ck), "--checkpoint-every", "4", "--model-out", str(tmp_path / "x.npz")]
    env = dict(os.environ, MPINN_FAULT="slow:0:1+", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
                         start_new_session=True)
    try:
        t0 = time.time()
        while not (ck.exists() and any(f.startswith("ckpt-") for f in os.listdir(ck))) and time.time() - t0 < 60:
            time.sleep(0.05)
        os.kill(p.pid, sig)                 # the launcher, as Slurm and a user's Ctrl-\ do
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == STOPPED_EXIT, (p.returncode, err[-2000:])
    name = "SIGTERM" if sig == signal.SIGTERM else "SIGUSR1"
    line = [x for x in err.splitlines() if x.startswith("mpinn: stopped by %s" % name)]
    assert line and "continue with --resume" in line[0], err[-2000:]
    written = re.search(r"checkpoint (\S+) written", line[0]).group(1)
    assert os.path.exists(written) and not [f for f in os.listdir(ck) if f.startswith(".tmp")]
    assert not (tmp_path / "x.npz").exists()
    assert (ck / "STOPPED").read_text() == line[0][len("mpinn: "):] + "\n"     # what a batch script requeues on
    r = train(2, ["--epochs", "2", "--resume", str(ck), "--model-out", str(tmp_path / "m.npz")])
    assert r.returncode == 0, r.stderr
    assert not (ck / "STOPPED").exists()
    assert np.array_equal(params(tmp_path / "m.npz"), params(uninterrupted / "m.npz"))     # bitwise


@pytest.mark.launch
@pytest.mark.mpi
def test_a_signal_while_a_peer_is_lost_in_the_evaluation_ends_the_job_in_seconds(tmp_path):
    """What `srun --kill-on-bad-exit` leaves when a rank dies while the others score the held-out rows: the
    survivors wait inside the evaluation's collective and get SIGTERM. They cannot agree to stop, so they abort
    after the time the epoch's end may take (twice the epoch's training, plus 2 s, the first time) and the
    grace, not after the step deadline (60 s here, 300 s by default: past Slurm's SIGKILL after 30 s)."""
    cmd = [mpiexec_path(), "-n", "2", sys.executable] + BASE + [
        "--epochs", "5", "--step-timeout", "60", "--model-out", str(tmp_path / "never.npz")]
    env = dict(os.environ, MPINN_FAULT="evalhang:1:1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
                         start_new_session=True)
    try:
        while "MPINN_FAULT: evalhang" not in p.stderr.readline():     # rank 1 hangs; rank 0 waits for it
            assert p.poll() is None, p.stderr.read()
        time.sleep(0.2)
        t = time.monotonic()
        os.kill(p.pid, signal.SIGTERM)      # mpiexec passes it to both ranks
        out, err = p.communicate(timeout=40)
        took = time.monotonic() - t
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode not in (0, STOPPED_EXIT), (p.returncode, err[-2000:])
    assert "SIGTERM arrived, and the ranks did not agree to stop" in err, err[-2000:]
    assert took < 15, took
    assert not (tmp_path / "never.npz").exists()


@pytest.mark.mpi
def test_a_fresh_run_does_not_take_over_another_runs_checkpoints(tmp_path, launcher):
    """Run B in run A's checkpoint directory is refused before it reads anything (its pruning would delete
    A's files, and a later --resume would pick them up); --resume continues A; --overwrite-checkpoints
    starts B afresh and deletes A's."""
    ck = tmp_path / "ck"
    r = train(2, ["--epochs", "1", "--checkpoint-dir", str(ck), "--model-out", str(tmp_path / "a.npz")])
    assert r.returncode == 0, r.stderr
    before = digest(ck)
    r = train(2, ["--epochs", "1", "--seed", "7", "--checkpoint-dir", str(ck), "--model-out", str(tmp_path / "b.npz")])
    assert r.returncode == 2 and "holds 1 checkpoint(s) of an earlier run" in r.stderr, r.stderr
    assert digest(ck) == before and not (tmp_path / "b.npz").exists()
    r = train(2, ["--epochs", "1", "--seed", "7", "--checkpoint-dir", str(ck), "--overwrite-checkpoints",
                  "--model-out", str(tmp_path / "b.npz")])
    assert r.returncode == 0, r.stderr
    names = os.listdir(ck)
    assert len(names) == 1 and names[0] not in before, (names, before)


@pytest.mark.mpi
def test_a_resumed_run_keeps_its_curve_and_refuses_a_best_epoch_it_has_no_copy_of(tmp_path, launcher):
    """Resuming continues the --curve file (the earlier epochs are not lost); --keep best from a checkpoint written
    with --keep last is refused (it holds no copy of the best epoch: the model file would hold the last epoch's
    parameters under the best one's name), and the refusal changes nothing."""
    ck, curve = tmp_path / "ck", tmp_path / "c.csv"
    r = train(2, ["--epochs", "1", "--keep", "last", "--checkpoint-dir", str(ck), "--curve", str(curve)])
    assert r.returncode == 0, r.stderr
    before = digest(tmp_path)
    r = train(2, ["--epochs", "2", "--resume", str(ck), "--curve", str(curve), "--model-out", str(tmp_path / "m.npz")])
    one_error_line(r, "written with --keep last and holds no copy of its best epoch (epoch 1)")
    assert digest(tmp_path) == before
    r = train(2, ["--epochs", "2", "--keep", "last", "--resume", str(ck), "--curve", str(curve)])
    assert r.returncode == 0, r.stderr
    rows = curve.read_text().splitlines()
    assert len(rows) == 3 and [row.split(",")[0] for row in rows] == ["epoch", "1", "2"], rows


@pytest.mark.mpi
def test_an_output_that_cannot_be_written_ends_the_run_before_the_data_is_read(tmp_path, launcher):
    (tmp_path / "afile").write_text("")
    pipe = tmp_path / "pipe.csv"
    os.mkfifo(pipe)         # reading it would block: the check must come first
    for option, value in (("--model-out", "afile/m.npz"), ("--metrics-out", "afile/m.json"),
                          ("--checkpoint-dir", "afile/ck"), ("--model-out", "."), ("--curve", "afile/c.csv")):
        r = mpirun(2, ["-m", "mpinn.train", "--data", str(pipe), "--label", "y", option,
                       str(tmp_path / value)], timeout=30)
        assert r.returncode == 2 and r.stderr.startswith("mpinn: error: %s" % option), (option, r.stderr)
        assert r.stderr.count("\n") == 1


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 3])
def test_resume_on_another_number_of_ranks_matches(tmp_path, uninterrupted, n, launcher):
    ck = tmp_path / "ck"
    r = train(2, ["--epochs", "1", "--checkpoint-dir", str(ck), "--checkpoint-every", "5",
                  "--model-out", str(tmp_path / "half.npz")])
    assert r.returncode == 0, r.stderr
    r = train(n, ["--epochs", "2", "--resume", str(ck), "--model-out", str(tmp_path / "m.npz")])
    assert r.returncode == 0, r.stderr
    np.testing.assert_allclose(params(tmp_path / "m.npz"), params(uninterrupted / "m.npz"), rtol=0, atol=1e-10)


@pytest.mark.mpi
@pytest.mark.parametrize("optimizer", ["adam", "ftrl"])
def test_optimizer_state_resumes_on_another_number_of_ranks(tmp_path, optimizer, launcher):
    """The state held in parts by 3 ranks (one copy for the node) is checkpointed whole and goes on
    at 2 ranks as the uninterrupted 2-rank run does."""
    opt = ["--optimizer", optimizer, "--epochs", "1"]
    r = train(2, opt + ["--model-out", str(tmp_path / "ref.npz")])
    assert r.returncode == 0, r.stderr
    ck = tmp_path / "ck"
    r = train(3, opt + ["--checkpoint-dir", str(ck), "--checkpoint-every", "9", "--model-out",
                        str(tmp_path / "np3.npz")])
    assert r.returncode == 0, r.stderr
    os.remove(step_file(ck, 22))     # go back to step 18, mid-epoch
    r = train(2, opt + ["--resume", str(ck), "--model-out", str(tmp_path / "m.npz")])
    assert r.returncode == 0, r.stderr
    assert "epoch 1, step 18" in r.stdout
    np.testing.assert_allclose(params(tmp_path / "m.npz"), params(tmp_path / "ref.npz"), rtol=0, atol=1e-10)


@pytest.mark.mpi
def test_a_hung_rank_aborts_the_job_within_the_deadline(tmp_path, launcher):
    t = time.time()
    r = train(2, ["--epochs", "1", "--step-timeout", "3"], env={"MPINN_FAULT": "hang:1:4"}, timeout=60)
    took = time.time() - t
    assert r.returncode == 3, (r.returncode, r.stderr)
    assert re.search(r"mpinn: error on rank \d of 2: step 4 \(epoch 1, batch 4 of 22\) did not finish "
                     r"within 3 s; aborting the job", r.stderr), r.stderr
    assert took < 30, took


@pytest.mark.mpi
def test_an_exception_on_one_rank_ends_every_rank(tmp_path, launcher):
    r = train(3, ["--epochs", "1"], env={"MPINN_FAULT": "raise:2:3"}, timeout=60)
    assert r.returncode == 1
    assert "mpinn: rank 2 of 3 failed with RuntimeError: injected failure at step 3; aborting the job" in r.stderr


@pytest.mark.mpi
def test_a_nan_step_is_skipped_and_counted(tmp_path, launcher):
    r = train(2, ["--epochs", "1", "--metrics-out", str(tmp_path / "m.json"), "--model-out",
                  str(tmp_path / "m.npz")], env={"MPINN_FAULT": "nan:1:5"})
    assert r.returncode == 0, r.stderr
    assert "step 5 skipped: non-finite loss or gradient (1 in a row, 1 in all)" in r.stdout
    summary = json.load(open(tmp_path / "m.json"))["summary"]
    assert summary["skipped_steps"] == 1 and summary["global_steps"] == 22
    assert np.isfinite(params(tmp_path / "m.npz")).all()


@pytest.mark.mpi
@pytest.mark.parametrize("reduce_", ["allreduce", "gather"])
def test_too_many_bad_steps_stop_with_the_last_good_checkpoint_intact(tmp_path, reduce_, launcher):
    ck = tmp_path / "ck"
    r = train(3, ["--epochs", "1", "--checkpoint-dir", str(ck), "--checkpoint-every", "2",
                  "--max-bad-steps", "3", "--reduce", reduce_], env={"MPINN_FAULT": "nan:0:6+"})
    assert r.returncode == 4, (r.returncode, r.stderr)
    assert ("training stopped: 3 consecutive steps had a non-finite loss or gradient (last at step 8, "
            "epoch 1); the last good checkpoint is %s" % step_file(ck, 4)) in r.stderr
    assert [int(n[-13:-4]) for n in sorted(os.listdir(ck))] == [2, 4]
    p = params(step_file(ck, 4))
    assert np.isfinite(p).all()
    # and it resumes (the fault gone): the job finishes
    r = train(2, ["--epochs", "1", "--resume", str(ck), "--max-bad-steps", "3", "--reduce", reduce_,
                  "--model-out", str(tmp_path / "m.npz")])
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------- bad input: exit 2, one line, nothing damaged
def one_error_line(r, message):
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(lines) == 1 and lines[0].startswith("mpinn: error") and message in lines[0], r.stderr


def write(path, text):
    path.write_text(text)
    return str(path)


BAD_CSV = {
    "truncated.csv": ("a,x,y\nq,1,0\nr,2", "line 3: 2 fields, the header has 3"),
    "nolabel.csv": ("a,x,z\nq,1,0\nr,2,1\n", "has no column 'y'"),
    "empty.csv": ("", "is empty"),
    "words.csv": ("a,x,y\nq,1,0\nr,oops,1\n", "line 3: column 'x' is not a number: 'oops'"),
    "wide.csv": ("a,x,y\nq,1,0\nr,2,1,7\n", "line 3: 4 fields, the header has 3"),
}


@pytest.fixture()
def precious(tmp_path):
    """An existing model file and checkpoint directory that a failing run must not touch."""
    ck = tmp_path / "ck"
    r = train(1, ["--epochs", "1", "--checkpoint-dir", str(ck), "--model-out", str(tmp_path / "model.npz")])
    assert r.returncode == 0, r.stderr
    return tmp_path, ck


@pytest.mark.mpi
def test_every_bad_input_is_one_line_exit_2_and_damages_nothing(precious, launcher):
    tmp, ck = precious
    # a fresh run may not use ck (it holds the earlier run's checkpoints: test_a_fresh_run_does_not_take_over...)
    out = ["--model-out", str(tmp / "model.npz"), "--checkpoint-dir", str(tmp / "fresh-ck")]
    cases = []
    for name, (text, message) in BAD_CSV.items():
        cases.append(([write(tmp / name, text), "--label", "y", "--categorical", "a", "--numeric", "x"],
                      message))
    pickled = tmp / "pickled.npz"
    np.savez(pickled, X=np.array([{"a": 1}], dtype=object), y=np.zeros(1))
    cases += [
        ([str(pickled)], "cannot load without pickle"),
        (["--lr", "-1"], "--lr: must be a positive number"),
        (["--batch-size", "0"], "--batch-size: must be a positive integer"),
        (["--default-rows", "2", "--holdout", "0"], "2 training rows for 3 ranks"),
        (["--resume", str(tmp / "nowhere")], "checkpoint directory %s does not exist" % (tmp / "nowhere")),
        (["--resume", str(ck), "--hidden", "8"], "written with --hidden [16], this run has [8]"),
        (["--resume", str(ck), "--hash-bits", "11"], "written with --hash-bits 12, this run has 11"),
        (["--checkpoint-dir", str(ck)], "holds 1 checkpoint(s) of an earlier run"),
        ([write(tmp / "twice.csv", "x,x,y\n" + "1,2,0\n3,4,1\n" * 20), "--label", "y"],     # both x left out
         "the data leaves no input column to learn from"),
    ]
    before = digest(tmp)
    for args, message in cases:
        r = train(3, ["--epochs", "1"] + out + args, timeout=60)
        one_error_line(r, message)
    assert digest(tmp) == before, "a failing run changed a file"


@pytest.mark.mpi
@pytest.mark.parametrize("damage", ["truncated", "pickled", "foreign"])
def test_a_damaged_checkpoint_is_refused_clearly(precious, damage, launcher):
    tmp, ck = precious
    newest = sorted(ck.iterdir())[-1]
    data = newest.read_bytes()
    if damage == "truncated":
        newest.write_bytes(data[: len(data) // 2])
        message = "is not a readable mpinn checkpoint"
    elif damage == "pickled":
        np.savez(newest, header=np.array([{"x": 1}], dtype=object), params=np.zeros(3))
        message = "refused (it holds pickled objects"
    else:
        np.savez(newest, header=np.array(json.dumps({"format": "something-else"})), params=np.zeros(3))
        message = "unknown checkpoint format 'something-else'"
    before = digest(tmp)
    r = train(2, ["--epochs", "2", "--resume", str(ck), "--model-out", str(tmp / "model.npz")], timeout=60)
    one_error_line(r, message)
    assert digest(tmp) == before


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_all_finite_sees_every_nan_and_inf(dtype):
    """The step verdict's check (BLAS asum on the host) finds a NaN, +Inf or -Inf at any position,
    in every SIMD lane and tail, and in strided or 2-D arrays (numpy's sum there)."""
    from mpinn.training.steps import all_finite
    for n in (1, 5, 63, 64, 1000, 4099):
        a = np.ones(n, dtype)
        assert all_finite(a) and all_finite(a.reshape(1, n)) and all_finite(a[::2])
        for pos in sorted(set(range(min(n, 70))) | {n // 2, n - 1}):
            for bad in (np.nan, np.inf, -np.inf):
                b = a.copy()
                b[pos] = bad
                assert not all_finite(b), (n, pos, bad)
                assert not all_finite(b.reshape(1, n))
                if pos % 2 == 0:
                    assert not all_finite(b[::2])
    assert all_finite(np.zeros(0, dtype))
