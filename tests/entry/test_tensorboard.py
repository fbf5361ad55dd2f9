"""--log-dir: the event files mpinn writes itself, read back by TensorBoard's own reader (which checks every record's
CRC-32C), hold the curve's values and the run's summary."""
import glob
import json
import sys

import numpy as np
import pytest

from conftest import mpirun, run
from mpinn.files.events import EventWriter, crc32c


def read_scalars(log_dir):
    """{tag: [(step, value)]} of the event files in log_dir, by TensorBoard's EventAccumulator."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def f32(v):
    return float(np.float32(v))


def test_crc32c_is_castagnolis():
    assert crc32c(b"123456789") == 0xE3069283       # the polynomial's published check value
    assert crc32c(b"") == 0


def test_tensorboard_reads_back_what_the_writer_wrote(tmp_path):
    w = EventWriter(str(tmp_path))
    w.scalars(1, {"a/x": 0.5, "a/y": -3.25, "skipped": float("nan")})
    w.scalars(2**40, {"a/x": 1e-30})
    w.close()
    got = read_scalars(tmp_path)
    assert got == {"a/x": [(1, 0.5), (2**40, f32(1e-30))], "a/y": [(1, -3.25)]}


def test_a_damaged_record_is_refused_by_tensorboard(tmp_path):
    """The reader checks the checksums: flipping one byte of a value loses that event (the test above is not blind)."""
    w = EventWriter(str(tmp_path))
    w.scalars(1, {"x": 0.5})
    w.close()
    data = bytearray(open(w.path, "rb").read())
    data[-6] ^= 0xFF            # inside the last event's float
    open(w.path, "wb").write(bytes(data))
    assert "x" not in read_scalars(tmp_path)


@pytest.mark.mpi
def test_log_dir_holds_the_curve_and_the_summary(tmp_path, launcher):
    tb, curve, metrics = tmp_path / "tb", tmp_path / "curve.jsonl", tmp_path / "m.json"
    r = mpirun(2, ["-m", "mpinn.train", "--default-rows", "4000", "--epochs", "3", "--hidden", "8", "--hash-bits", "12",
                   "--ensemble", "1", "--eval-every", "10", "--no-progress", "--model-out", str(tmp_path / "m.npz"),
                   "--curve", str(curve), "--metrics-out", str(metrics), "--log-dir", str(tb)], timeout=180)
    assert r.returncode == 0, r.stderr
    files = glob.glob(str(tb / "events.out.tfevents.*"))
    assert len(files) == 1 and "TensorBoard events written to %s" % files[0] in r.stdout
    got = read_scalars(tb)
    rows = [json.loads(line) for line in curve.read_text().splitlines()]
    assert len(rows) > 3 and any(row["at"] == "step" for row in rows)          # the --eval-every points too
    assert got["train/loss"] == [(row["step"], f32(row["train_loss"])) for row in rows]
    for k in ("accuracy", "logloss", "auc"):
        assert got["valid/" + k] == [(row["step"], f32(row["valid_" + k])) for row in rows]
    # rows trained per second of training between two points (their held-out evaluations left out)
    rates = got["train/samples_per_s"]
    assert [s for s, _ in rates] == [row["step"] for row in rows]
    for (_, rate), a, b in zip(rates[1:], rows, rows[1:]):
        seconds = (b["elapsed"] - a["elapsed"]) - (b["eval_seconds"] - a["eval_seconds"])
        expected = (b["samples"] - a["samples"]) / seconds
        assert rate == f32(expected)
    summary = json.load(open(metrics))["summary"]
    phases = summary["phase_s_mean"]
    last = summary["global_steps"]
    assert got["run/samples_per_s"] == [(last, f32(summary["samples_per_s"]))]
    for tag, k in (("data_wait", "data"), ("compute", "compute"), ("communication", "comm"), ("update", "update")):
        assert got["time/" + tag] == [(last, f32(phases[k] / sum(phases.values())))]


@pytest.mark.mpi
def test_a_run_resumed_from_an_older_checkpoint_shows_each_step_once(tmp_path, launcher):
    """The first run died after step 30 with only its checkpoint of step 10 left: resumed, it writes steps 15 to 30
    again, and TensorBoard shows every step once (the run's restart mark), the resumed run's values there."""
    import os
    import time
    tb, ck = tmp_path / "tb", tmp_path / "ck"
    args = ["-m", "mpinn.train", "--default-rows", "4000", "--epochs", "2", "--hidden", "8", "--hash-bits", "12",
            "--batch-size", "256", "--eval-every", "5", "--ensemble", "1", "--no-progress", "--log-dir", str(tb),
            "--checkpoint-every", "10", "--keep-checkpoints", "20"]
    r = mpirun(1, args + ["--checkpoint-dir", str(ck), "--model-out", str(tmp_path / "a.npz")], timeout=120)
    assert r.returncode == 0, r.stderr
    for name in os.listdir(ck):
        if not name.endswith("-%09d.npz" % 10):
            os.unlink(ck / name)        # as if the run had died right after step 10's checkpoint
    time.sleep(1.1)                     # the resumed run's event file is named by a later second
    r = mpirun(1, args + ["--resume", str(ck), "--model-out", str(tmp_path / "b.npz")], timeout=120)
    assert r.returncode == 0 and "step 10" in r.stdout, r.stderr
    steps = [s for s, _ in read_scalars(tb)["valid/logloss"]]
    assert steps == sorted(set(steps)) and steps[0] == 5 and steps[-1] == 30, steps     # 15 steps an epoch


def test_a_log_dir_that_is_a_file_is_one_line_before_anything_is_read(tmp_path):
    (tmp_path / "taken").write_text("")
    r = run([sys.executable, "-m", "mpinn.train", "--default-rows", "2000", "--log-dir", str(tmp_path / "taken"),
             "--model-out", str(tmp_path / "m.npz")], timeout=60)
    assert r.returncode == 2 and "--log-dir %s is a file" % (tmp_path / "taken") in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "data:" not in r.stdout and not (tmp_path / "m.npz").exists()


def test_a_resumed_runs_restart_drops_the_points_it_writes_again(tmp_path):
    """A run died at step 30 after its checkpoint of step 20; resumed, it writes steps 25 and 30 again: its restart
    mark (SessionLog START at 21) makes TensorBoard keep one point a step, not 10, 20, 25, 30, 25, 30."""
    import time
    first = EventWriter(str(tmp_path))
    for step in (10, 20, 25, 30):
        first.scalars(step, {"valid/auc": step / 100})
    first.close()
    time.sleep(1.1)             # a later file name (its seconds), as a resumed run's is
    again = EventWriter(str(tmp_path))
    again.restart(21)
    for step in (25, 30, 40):
        again.scalars(step, {"valid/auc": step / 100 + 0.001})
    again.close()
    got = read_scalars(tmp_path)["valid/auc"]
    assert [s for s, _ in got] == [10, 20, 25, 30, 40] and got[2][1] == f32(0.251), got
