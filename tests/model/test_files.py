"""Model files and checkpoints: round trips, and modes a colleague on a shared cluster can read."""
import os
import stat

import numpy as np

from mpinn.files.checkpoint import load_checkpoint, load_model, save_checkpoint, save_model
from mpinn.core.spec import ModelSpec


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_model_and_checkpoint_files_follow_the_umask(tmp_path):
    spec = ModelSpec(0, 3, (2,), 1, "relu", "sigmoid", "float64")
    params = np.arange(11, dtype=np.float64)
    old = os.umask(0o022)
    try:
        save_model(str(tmp_path / "m.npz"), params, spec, {"task": "binary"})
        ckpt = save_checkpoint(str(tmp_path / "ck"), 7, {"params": params}, {"position": {}}, keep=2)
    finally:
        os.umask(old)
    assert mode_of(tmp_path / "m.npz") == 0o644
    assert mode_of(ckpt) == 0o644
    got, got_spec, meta = load_model(str(tmp_path / "m.npz"))
    assert np.array_equal(got, params) and got_spec == spec and meta["task"] == "binary"
    arrays, header = load_checkpoint(str(tmp_path / "ck"))
    assert np.array_equal(arrays["params"], params)


def test_a_checkpoint_save_removes_its_own_runs_stray_temporaries_and_no_other_runs(tmp_path):
    """A writer killed mid-write leaves a temporary; this run's next save removes its own, but never the file
    another run is writing into the same directory at that moment."""
    ck = tmp_path / "ck"
    ck.mkdir()
    mine, theirs = ck / ".tmp-ckpt-aaaa-x1.npz", ck / ".tmp-ckpt-bbbb-x2.npz"
    mine.write_bytes(b"half")
    theirs.write_bytes(b"being written")
    path = save_checkpoint(str(ck), 3, {"params": np.zeros(2)}, {"position": {}}, run="aaaa")
    assert not mine.exists() and theirs.exists()
    assert sorted(os.listdir(ck)) == sorted([os.path.basename(path), theirs.name])


def test_sigterm_in_a_one_process_command_removes_its_temporary_file_and_is_one_line(tmp_path, capsys):
    """predict and prepare (run_one_process): SIGTERM (scancel, kill) becomes an exception where the process is, so
    the writer's cleanup runs: no temporary file, no output, one line, exit 143 (Python's default left them)."""
    import signal
    from mpinn.files.outputs import written_whole
    from mpinn.host.exits import run_one_process
    out = tmp_path / "p.csv"

    def run(args):
        with written_whole(str(out), "the predictions") as f:
            f.write("prediction\n" * 1000)
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):           # the handler runs between bytecodes of this thread
                f.write("more\n")
        return 0
    old = signal.getsignal(signal.SIGTERM)
    try:
        assert run_one_process(run, None) == 143
    finally:
        signal.signal(signal.SIGTERM, old)
    assert os.listdir(tmp_path) == []
    assert capsys.readouterr().err == "mpinn: error: stopped by SIGTERM; its output not written\n"
