"""End to end: the real CLIs as subprocesses under mpiexec, with timeouts."""
import json
import subprocess

import numpy as np
import pytest

from conftest import ROOT, mpirun, run
import sys


def train(n, args, tmp_path, timeout=180):
    model, metrics = str(tmp_path / "model.npz"), str(tmp_path / "metrics.json")
    r = mpirun(n, ["-m", "mpinn.train", "--no-progress", "--model-out", model, "--metrics-out", metrics]
               + list(args), timeout)
    return r, model, metrics


def predict(args, timeout=120):
    return run([sys.executable, "-m", "mpinn.predict"] + list(args), timeout)


@pytest.mark.mpi
def test_default_data_trains_on_two_ranks_and_predict_reproduces(tmp_path, launcher):
    r, model, metrics = train(2, ["--default-rows", "40000", "--epochs", "2"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "epoch 2/2" in r.stdout and "samples/s over 2 ranks" in r.stdout
    assert "gradients: summed in shared memory" in r.stdout    # auto: both ranks on this one node
    assert "parameters and optimizer state: one copy per node" in r.stdout     # a model with hashed inputs
    reported = json.load(open(metrics))["valid"]
    assert reported["auc"] >= 0.70 and reported["accuracy"] >= 0.64, reported   # measured 0.72 / 0.66
    out = tmp_path / "pred.json"
    p = predict(["--model", model, "--metrics-out", str(out), "--out", str(tmp_path / "p.csv")])
    assert p.returncode == 0, p.stderr
    again = json.load(open(out))
    for k in ("accuracy", "auc", "logloss"):
        assert again[k] == pytest.approx(reported[k], abs=1e-9)
    assert len(open(tmp_path / "p.csv").read().splitlines()) == 4000 + 1


def test_predict_holds_out_the_rows_training_held_out_with_holdout_by_last(tmp_path):
    """Without --data, predict scores the embedded log's held-out rows as training chose them: its last rows with
    --holdout-by last (a random draw would score rows trained on, and look better than the model is)."""
    r, model, metrics = train(1, ["--default-rows", "5000", "--epochs", "1", "--holdout-by", "last"], tmp_path)
    assert r.returncode == 0, r.stderr
    reported = json.load(open(metrics))["valid"]
    p = predict(["--model", model, "--metrics-out", str(tmp_path / "p.json")])
    assert p.returncode == 0, p.stderr
    again = json.load(open(tmp_path / "p.json"))
    for k in ("accuracy", "auc", "logloss"):
        assert again[k] == pytest.approx(reported[k], abs=1e-9), k


def test_outputs_go_into_folders_not_yet_made(tmp_path):
    """Every output's folder is made when missing (as --model-out's always was): a run accepted at its start does
    not end in a traceback after training, with the model file already replaced."""
    new = tmp_path / "new"
    model = str(new / "f" / "model.npz")
    r = mpirun(1, ["-m", "mpinn.train", "--no-progress", "--default-rows", "3000", "--epochs", "1", "--model-out", model,
                   "--metrics-out", str(new / "a" / "m.json"), "--curve", str(new / "b" / "c.csv"),
                   "--timeline", str(new / "c" / "t.json")], 180)
    assert r.returncode == 0, r.stderr
    p = predict(["--model", model, "--out", str(new / "d" / "p.csv"), "--metrics-out", str(new / "e" / "m.json")])
    assert p.returncode == 0, p.stderr
    for name in ("a/m.json", "b/c.csv", "c/t.json", "d/p.csv", "e/m.json"):
        assert (new / name).stat().st_size > 0, name


@pytest.mark.mpi
def test_predict_under_mpirun_is_refused_in_one_line(tmp_path, launcher):
    """predict is one process: two would each predict the whole file and write the same --out."""
    r, model, _ = train(1, ["--default-rows", "2000", "--epochs", "1"], tmp_path)
    assert r.returncode == 0, r.stderr
    p = mpirun(2, ["-m", "mpinn.predict", "--model", model, "--out", str(tmp_path / "p.csv")], 60)
    assert p.returncode == 2 and p.stderr == ("mpinn: error: predict runs in one process, and mpirun started 2: run "
                                              "python -m mpinn.predict without mpirun\n"), p.stderr
    assert not (tmp_path / "p.csv").exists()


def accurate_and_reproduced(metrics, model, data, tmp_path, accuracy=0.9):
    """The held-out accuracy training reported is high, and predict on the same file reproduces it."""
    reported = json.load(open(metrics))["valid"]
    assert reported["accuracy"] >= accuracy, reported
    p = predict(["--model", model, "--data", data, "--metrics-out", str(tmp_path / "p.json")])
    assert p.returncode == 0, p.stderr
    assert json.load(open(tmp_path / "p.json"))["accuracy"] == pytest.approx(reported["accuracy"], abs=1e-12)


def make_csv(path, n, seed):
    """Three classes decided by a categorical column and a numeric one, plus a noise column."""
    rng = np.random.default_rng(seed)
    city = rng.choice(["paris", "oslo", "rome", "lima", "kyiv", "doha"], n)
    x = rng.standard_normal(n)
    noise = rng.integers(0, 1000, n)
    label = np.where(np.isin(city, ["paris", "oslo"]), "north", np.where(x > 0, "up", "down"))
    with open(path, "w") as f:
        f.write("city,noise,x,label\n")
        for row in zip(city, noise, x, label):
            f.write("%s,%d,%.6f,%s\n" % row)
    return str(path)


@pytest.mark.mpi
@pytest.mark.parametrize("reduce_", ["allreduce", "gather"])
def test_csv_trains_and_predict_reproduces(tmp_path, reduce_, launcher):
    tr, va = make_csv(tmp_path / "train.csv", 3000, 1), make_csv(tmp_path / "valid.csv", 600, 2)
    r, model, metrics = train(2, [tr, "--label", "label", "--categorical", "city,noise", "--numeric", "x",
                                  "--valid", va, "--epochs", "8", "--batch-size", "100",
                                  "--hash-bits", "12", "--hidden", "16", "--reduce", reduce_, "--ensemble", "1"],
                              tmp_path)         # one model: its held-out metrics are predict's
    assert r.returncode == 0, r.stderr
    accurate_and_reproduced(metrics, model, va, tmp_path)


def one_error_line(r, message):
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(lines) == 1 and lines[0].startswith("mpinn: error") and message in lines[0], r.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("args,message", [
    (["--batch-size", "0"], "--batch-size: must be a positive integer"),
    (["--lr", "-0.1"], "--lr: must be a positive number"),
    (["nothere.csv", "--label", "y"], "does not exist"),
    (["--default-rows", "2", "--holdout", "0"], "2 training rows for 3 ranks"),
    (["--seed", "-1"], "--seed: must be >= 0, not -1"),        # was numpy's ValueError, exit 1
    (["--hash-seed", "-1"], "--hash-seed: must be in 0..2^64-1"),      # xxhash's 2^64 - 1 under another name
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message, launcher):
    r, model, _ = train(3, args, tmp_path, timeout=60)
    one_error_line(r, message)
    assert not (tmp_path / "model.npz").exists()


@pytest.mark.mpi
def test_bad_csv_names_the_line(tmp_path, launcher):
    p = tmp_path / "bad.csv"
    p.write_text("a,x,y\nq,1,0\nr,oops,1\n")
    r, _, _ = train(2, [str(p), "--label", "y", "--categorical", "a", "--numeric", "x"], tmp_path, 60)
    one_error_line(r, "line 3: column 'x' is not a number: 'oops'")


def test_predict_refuses_a_truncated_model(tmp_path):
    good = tmp_path / "m.npz"
    np.savez(good, params=np.zeros(3))
    data = open(good, "rb").read()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    r = predict(["--model", str(tmp_path / "cut.npz"), "--data", "x.csv"])
    assert r.returncode == 2 and "not a readable mpinn model file" in r.stderr


def test_help_is_clear():
    """--help: the common options on two screens; --help-all: every option, the whole reference."""
    r = run([sys.executable, "-m", "mpinn.train", "--help"])
    assert r.returncode == 0 and "--epochs" in r.stdout and "embedded click log" in r.stdout
    assert len(r.stdout.splitlines()) <= 80 and "--reduce" not in r.stdout and "--help-all" in r.stdout
    assert "(default )" not in r.stdout and "adagrad lr 0.05" in r.stdout and "adagrad 0.01" in r.stdout
    r = run([sys.executable, "-m", "mpinn.train", "--help-all"])
    assert r.returncode == 0 and "--reduce" in r.stdout and "embedded synthetic click log" in r.stdout
    assert "(default )" not in r.stdout


@pytest.mark.mpi
def test_mat_file_in_ng_format_end_to_end(tmp_path, launcher):
    """scikit-learn's digits written as Ng's ex4 .mat (labels 1..10, 10 = digit 0), Fortran order
    as loadmat returns it; the Ng network with one-vs-all sigmoid outputs."""
    import scipy.io
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    mat = str(tmp_path / "digits.mat")
    scipy.io.savemat(mat, {"X": X / 16.0, "y": np.where(y == 0, 10, y).reshape(-1, 1)})
    r, model, metrics = train(2, [mat, "--hidden", "25", "--activation", "sigmoid", "--loss", "sigmoid",
                                  "--batch-size", "64", "--epochs", "10", "--lr", "1"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.load(open(metrics))["valid"]["accuracy"] >= 0.9          # measured 0.956
    out = tmp_path / "pred.csv"
    p = predict(["--model", model, "--data", mat, "--out", str(out)])
    assert p.returncode == 0, p.stderr
    rows = out.read_text().splitlines()
    assert rows[0].startswith("prediction,p_1,") and rows[0].endswith(",p_10") and len(rows) == 1798
    predicted = np.array([int(r.split(",")[0]) for r in rows[1:]])
    assert np.mean(predicted == np.where(y == 0, 10, y)) >= 0.85        # labels come back as 1..10


def prepare_cli(args, timeout=120):
    return run([sys.executable, "-m", "mpinn.prepare"] + list(args), timeout)


@pytest.mark.mpi
def test_prepare_then_train_on_the_packed_file_and_predict(tmp_path, launcher):
    """prepare hashes a CSV once (split mode); training reads the packed file; a held-out CSV prepared
    --like it validates; predict on the raw CSV gives the metric training reported."""
    tr, va = make_csv(tmp_path / "train.csv", 3000, 1), make_csv(tmp_path / "valid.csv", 600, 2)
    p = prepare_cli([tr, "--label", "label", "--categorical", "city,noise", "--numeric", "x",
                     "--hash-mode", "split", "--chunk-rows", "500", "--out", str(tmp_path / "tr.mpinn"),
                     "--verify", "--report"])
    assert p.returncode == 0, p.stderr
    assert "wrote" in p.stdout and "3000 rows" in p.stdout and "collisions:" in p.stdout
    assert "rows/s" in p.stderr
    p = prepare_cli([va, "--like", str(tmp_path / "tr.mpinn"), "--out", str(tmp_path / "va.mpinn")])
    assert p.returncode == 0, p.stderr
    r, model, metrics = train(2, [str(tmp_path / "tr.mpinn"), "--valid", str(tmp_path / "va.mpinn"),
                                  "--epochs", "8", "--batch-size", "100", "--hidden", "16", "--ensemble", "1"], tmp_path)
    assert r.returncode == 0, r.stderr
    accurate_and_reproduced(metrics, model, va, tmp_path)


@pytest.mark.mpi
def test_train_hashes_csv_in_split_mode_with_bucket_overrides(tmp_path, launcher):
    tr, va = make_csv(tmp_path / "train.csv", 2000, 1), make_csv(tmp_path / "valid.csv", 400, 2)
    r, model, metrics = train(2, [tr, "--label", "label", "--categorical", "city,noise", "--numeric", "x",
                                  "--valid", va, "--hash-mode", "split", "--hash-k", "2", "--buckets", "city=3",
                                  "--epochs", "6", "--batch-size", "100", "--hidden", "16"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "input columns" in r.stdout and json.load(open(metrics))["valid"]["accuracy"] >= 0.85


def test_prepare_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,x,y\nq,1,0\nr,oops,1\n")
    out = str(tmp_path / "o.mpinn")
    one_error_line(prepare_cli([str(bad), "--label", "y", "--categorical", "a", "--numeric", "x", "--out", out]),
                   "line 3: column 'x' is not a number: 'oops'")
    one_error_line(prepare_cli([str(bad), "--label", "y", "--buckets", "a=3", "--out", out]),
                   "--buckets is for --hash-mode split")
    one_error_line(prepare_cli(["--default-rows", "10", "--out", str(tmp_path / "o.npz")]), "ends in .mpinn")
    one_error_line(prepare_cli(["--default-seed", "-1", "--out", out]), "--default-seed: must be >= 0, not -1")
    assert not (tmp_path / "o.mpinn").exists()


@pytest.mark.mpi
def test_training_on_a_truncated_packed_file_is_one_line(tmp_path, launcher):
    cut = tmp_path / "cut.mpinn"
    assert prepare_cli(["--default-rows", "500", "--out", str(cut), "--quiet"]).returncode == 0
    cut.write_bytes(cut.read_bytes()[:20000])      # past the header (the numeric columns' quantiles included)
    r, _, _ = train(2, [str(cut)], tmp_path, 60)
    one_error_line(r, "cut.mpinn is truncated: 20000 bytes, its header says")


@pytest.mark.mpi
@pytest.mark.parametrize("mode", [["--compress", "fp16"], ["--compress", "bf16"], ["--average-every", "3"]])
def test_less_to_send_and_the_timeline_end_to_end(tmp_path, mode, launcher):
    trace = str(tmp_path / "trace.json")
    r, model, metrics = train(2, ["--default-rows", "20000", "--epochs", "1", "--hidden", "16",
                                  "--timeline", trace] + mode, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "timeline written to" in r.stdout
    summary = json.load(open(metrics))["summary"]
    events = [e for e in json.load(open(trace))["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in events} == {0, 1}
    for rank in (0, 1):
        for phase, seconds in summary["phase_s_per_rank"][rank].items():
            got = sum(e["dur"] for e in events if e["pid"] == rank and e["name"] == phase) / 1e6
            assert got == pytest.approx(seconds, rel=1e-9, abs=1e-9)
    assert json.load(open(metrics))["valid"]["auc"] > 0.6


def test_data_is_given_as_an_option_or_positionally():
    from mpinn.settings.parse import build_parser
    p = build_parser()
    assert p.parse_args(["--data", "a.csv", "--label", "y"]).data == "a.csv"
    assert p.parse_args(["a.csv", "--label", "y"]).data == "a.csv"
    assert p.parse_args(["a.csv", "--data", "a.csv"]).data == "a.csv"
    assert p.parse_args([]).data is None and not hasattr(p.parse_args([]), "data_positional")
    p.raise_errors = True
    from mpinn.core.errors import MpinnError
    with pytest.raises(MpinnError, match="given twice"):
        p.parse_args(["a.csv", "--data", "b.csv"])


def test_several_files_follow_data_and_valid_on_the_command_line_and_in_a_run_file(tmp_path):
    """docs/data.md: --data (of train, predict and prepare) takes several files one after another, as the
    positional files do; --valid too; a run file's data = [...] (what --print-config writes) is the same run."""
    from mpinn.predict import build_parser as predict_parser
    from mpinn.prepare import build_parser as prepare_parser
    from mpinn.settings import from_argv
    from mpinn.settings.parse import build_parser
    two = ("a.csv", "b.csv")
    ns = build_parser().parse_args(["--data", "a.csv", "b.csv", "--label", "y", "--valid", "v.csv", "w.csv"])
    assert ns.data == two and ns.valid == ("v.csv", "w.csv")
    assert build_parser().parse_args(["a.csv", "b.csv", "--label", "y"]).data == two
    assert predict_parser().parse_args(["--model", "m.npz", "--data", "a.csv", "b.csv"]).data == two
    assert prepare_parser().parse_args(["--data", "a.csv", "b.csv", "--out", "x.mpinn"]).data == two
    assert predict_parser().parse_args(["--model", "m.npz", "a.csv", "b.csv"]).data == two
    (tmp_path / "run.toml").write_text('data = ["a.csv", "b.csv"]\nvalid = ["v.csv"]\nlabel = "y"\n')
    cfg = from_argv(["--config", str(tmp_path / "run.toml")])
    assert cfg.data == two and cfg.valid == "v.csv"


@pytest.mark.mpi
def test_train_and_prepare_take_data_as_an_option(tmp_path, launcher):
    """train --data FILE (the form predict uses) trains exactly as train FILE; prepare --data FILE too."""
    tr = make_csv(tmp_path / "train.csv", 600, 1)
    common = ["--label", "label", "--categorical", "city", "--numeric", "x", "--epochs", "1", "--hash-bits", "8",
              "--hidden", "4"]
    params = []
    for form in (["--data", tr], [tr]):
        r, model, _ = train(2, form + common, tmp_path)
        assert r.returncode == 0, r.stderr
        with np.load(model) as z:
            params.append(z["params"])
    assert np.array_equal(params[0], params[1])
    p = prepare_cli(["--data", tr, "--label", "label", "--categorical", "city", "--out", str(tmp_path / "t.mpinn")])
    assert p.returncode == 0 and "600 rows" in p.stdout, p.stderr


@pytest.mark.launch
def test_a_one_process_command_whose_reader_goes_away_ends_quietly():
    """`python -m mpinn.predict ... | head -1`: stdout closed under it is exit code 141 (a shell's for SIGPIPE) and
    nothing on stderr, not a traceback."""
    child = ("import sys\nfrom mpinn.host.exits import run_one_process\n"
             "def run(args):\n    raise BrokenPipeError(32, 'Broken pipe')\n"
             "sys.exit(run_one_process(run, None))\n")
    r = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 141 and r.stderr == "", (r.returncode, r.stderr)
