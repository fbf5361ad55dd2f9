"""A write that fails (a full disk, a file-size limit) at the end of a run or in the middle of one: one line and exit
code 2, the file that was there intact, no temporary file left, and the trained parameters kept (a fallback model
file in $TMPDIR, or the last checkpoint named). Real limits where the machine allows: a 1 MiB tmpfs (root), and
RLIMIT_FSIZE (anyone: `ulimit -f`); in one process, a monkeypatched ENOSPC."""
import errno
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import mpirun, run


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB tmpfs mounted at tmp_path/disk (root only: skipped where mount is not allowed)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip("cannot mount a tmpfs here (%s)" % r.stderr.strip())
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)])


def one_line(r):
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mpinn: error: "), r.stderr[-3000:]
    return lines[0]


def leftovers(*dirs):
    return [os.path.join(d, n) for d in dirs for n in os.listdir(d) if n.startswith(".tmp-")]


BIG_MODEL = ["-m", "mpinn.train", "--default-rows", "3000", "--epochs", "1", "--hidden", "4", "--no-progress"]


@pytest.mark.mpi
def test_a_model_file_on_a_full_disk_goes_to_the_fallback_and_the_old_one_stays(tiny_disk, tmp_path, launcher):
    old = tiny_disk / "m.npz"
    old.write_bytes(b"the previous model")
    fallback = tmp_path / "fallback"
    fallback.mkdir()
    # 2^16 hashed rows x (4 hidden + 1 wide) float32: 1.3 MB, more than the disk holds
    r = mpirun(2, BIG_MODEL + ["--hash-bits", "16", "--model-out", str(old)], env={"TMPDIR": str(fallback)})
    line = one_line(r)
    assert "the model could not be written to %s (No space left on device); the file there is as it was" % old \
        in line, line
    assert old.read_bytes() == b"the previous model" and not leftovers(tiny_disk)
    written = [str(fallback / n) for n in os.listdir(fallback)]
    assert len(written) == 1 and ("the trained model was written to %s instead" % written[0]) in line
    p = run([sys.executable, "-m", "mpinn.predict", "--model", written[0]])     # a whole model: it predicts
    assert p.returncode == 0 and "auc" in p.stdout, p.stderr


@pytest.mark.mpi
def test_a_checkpoint_directory_that_fills_mid_run_keeps_its_checkpoints(tiny_disk, tmp_path, launcher):
    ck = tiny_disk / "ck"
    # each checkpoint ~180 kB: the sixth does not fit
    r = mpirun(2, BIG_MODEL + ["--hash-bits", "12", "--epochs", "2", "--checkpoint-dir", str(ck),
                               "--checkpoint-every", "5", "--keep-checkpoints", "10",
                               "--model-out", str(tmp_path / "m.npz")])
    line = one_line(r)
    assert "could not be written to %s (No space left on device): the earlier checkpoints are intact" % ck in line
    assert not leftovers(ck) and not (tmp_path / "m.npz").exists()
    from mpinn.files.checkpoint import list_checkpoints, load_checkpoint
    found = list_checkpoints(str(ck))
    assert len(found) >= 2 and found[-1][1] in line
    arrays, header = load_checkpoint(str(ck))
    assert header["path"] == found[-1][1] and np.isfinite(arrays["params"]).all()


def limited(args, fsize):
    """python -m ARGS under a file-size limit of fsize bytes (as `ulimit -f` sets it), through mpiexec at np 2."""
    from conftest import mpiexec_path
    probe = ("import os, resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (%d, %d)); "
             "os.execv(sys.argv[1], sys.argv[1:])" % (fsize, fsize))
    return [sys.executable, "-c", probe, mpiexec_path(), "-n", "2", sys.executable] + args


@pytest.mark.mpi
def test_a_file_size_limit_is_one_line_not_a_kill_by_sigxfsz(tmp_path, launcher):
    """RLIMIT_FSIZE of 16 MB (MPI itself needs a few MB of files to start) and a model of 25 MB: the write fails with
    EFBIG (SIGXFSZ is ignored; before, a traceback and an abort), one line, the old file intact."""
    old = tmp_path / "m.npz"
    old.write_bytes(b"the previous model")
    fallback = tmp_path / "fallback"
    fallback.mkdir()
    r = run(limited(BIG_MODEL + ["--hash-bits", "21", "--hidden", "2", "--comm", "mpi", "--model-out", str(old)],
                    16_000_000), env={"TMPDIR": str(fallback)})
    line = one_line(r)
    assert "could not be written to %s (File too large); the file there is as it was" % old in line, line
    assert "nor to a fallback file" in line            # the same limit holds there
    assert old.read_bytes() == b"the previous model" and not leftovers(tmp_path, fallback)
    assert not os.listdir(fallback)


def test_enospc_in_process_leaves_the_old_file_and_writes_the_fallback(tmp_path, monkeypatch):
    """The same, where no disk can be filled: the first write fails as a full disk would, mid-file."""
    from mpinn.core.errors import MpinnError
    from mpinn.core.spec import ModelSpec
    from mpinn.training import results

    real = np.savez
    calls = []

    def savez(f, **arrays):
        calls.append(f)
        if len(calls) == 1:
            f.write(b"half a file")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(f, **arrays)

    monkeypatch.setattr("mpinn.files.checkpoint.np.savez", savez)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "fallback"))
    (tmp_path / "fallback").mkdir()
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)      # gettempdir() reads TMPDIR again
    old = tmp_path / "m.npz"
    old.write_bytes(b"old")
    spec = ModelSpec(n_sparse=0, n_dense=3, hidden=(2,), n_out=1, loss="sigmoid")
    params = np.arange(spec.n_params, dtype=np.float32)

    class Trainer:
        checkpoints = None
    with pytest.raises(MpinnError) as e:
        results.save_model_or_say_where(str(old), params, spec, {"task": "binary"}, Trainer())
    assert old.read_bytes() == b"old" and not leftovers(tmp_path)
    (fallback,) = os.listdir(tmp_path / "fallback")
    assert str(e.value).endswith("the trained model was written to %s instead" % (tmp_path / "fallback" / fallback))
    from mpinn.files.checkpoint import load_model
    got, got_spec, _ = load_model(str(tmp_path / "fallback" / fallback))
    assert np.array_equal(got, params) and got_spec == spec


def test_enospc_for_a_checkpoint_names_the_last_one(tmp_path, monkeypatch):
    from mpinn.files.checkpoint import list_checkpoints
    from mpinn.comm.guard import NoWatchdog
    from mpinn.core.errors import MpinnError
    from mpinn.training.checkpoints import Checkpoints

    class Comm:
        rank, size = 0, 1

        def bcast_obj(self, obj):
            return obj

    class Stepper:
        def saved_arrays(self):
            return {"params": np.ones(10)}

    class Trainer:
        comm, watchdog, stepper, best_params, global_step = Comm(), NoWatchdog(), Stepper(), None, 7

        def position(self):
            return {"epoch": 1}

    ck = Checkpoints(str(tmp_path / "ck"), keep=3, meta={"run": "0123456789ab"})
    ck.save(Trainer(), "step")
    first = ck.last

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr("mpinn.training.checkpoints.save_checkpoint", full)
    Trainer.global_step = 9
    with pytest.raises(MpinnError) as e:
        ck.save(Trainer(), "step")
    assert e.value.collective and "checkpoint of step 9 could not be written" in str(e.value)
    assert first in str(e.value) and list_checkpoints(str(tmp_path / "ck"))[-1][1] == first


@pytest.mark.launch       # the tiny disk is a tmpfs mounted by `mount`
def test_predictions_on_a_full_disk_are_one_line_and_the_old_file_stays(tiny_disk, tmp_path):
    rows = 150_000                  # about 1.5 MB of predictions: more than the disk holds
    with open(tmp_path / "d.csv", "w") as f:
        f.write("y,a,x\n" + "".join("%d,v%d,%.3f\n" % (i % 2, i % 5, i / 7) for i in range(rows)))
    model = tmp_path / "m.npz"
    r = run([sys.executable, "-m", "mpinn.train", "--data", str(tmp_path / "d.csv"), "--label", "y", "--epochs", "1",
             "--quiet", "--model-out", str(model)])
    assert r.returncode == 0, r.stderr
    out = tiny_disk / "p.csv"
    out.write_bytes(b"the previous predictions")
    p = run([sys.executable, "-m", "mpinn.predict", "--model", str(model), "--data", str(tmp_path / "d.csv"),
             "--out", str(out)])
    line = one_line(p)
    assert line == "mpinn: error: the predictions could not be written to %s (No space left on device)" % out
    assert out.read_bytes() == b"the previous predictions" and not leftovers(tiny_disk)
