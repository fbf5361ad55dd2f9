"""What a new user reads is true: --help's defaults by model shape are what a run resolves (a log's one pass
included); --print-config MODEL with options prints them over the model's; the doctor's advice names the option
that takes it, and that option does what it says."""
import math
import re
import sys

import mpinn.api as mp
from conftest import run
from mpinn.core.batch import Layout
from mpinn.bench.tour import write_tour_files
from mpinn.data.info import DataInfo
from mpinn.doctor import host_notes
from mpinn.settings import from_argv, from_keywords, resolve


def info(n_sparse, task, n_train):
    return DataInfo({"task": task}, Layout(n_sparse, 3, "float32", "float32"), 1, 5.0, n_train, True)


def test_the_helps_defaults_by_shape_are_what_a_run_resolves():
    r = run([sys.executable, "-m", "mpinn.train", "--help"])
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    shapes = dict((m[0], m[1:]) for m in re.findall(
        r"(\w+): (\w+) lr ([\d.]+), lr decay (\w+), (\d+) epochs at most \(early stop after (\d+)\)", text))
    for shape, data in (("wide", info(1000, "binary", 50_000)), ("dense", info(0, "binary", 50_000)),
                        ("regression", info(1000, "regression", 50_000))):
        cfg = resolve(from_keywords(None), data, 2)
        assert shapes[shape] == (cfg.optimizer, "%g" % cfg.lr, cfg.lr_decay, str(cfg.epochs), str(cfg.early_stop))
    rows, epochs, checks = map(int, re.search(r"but a log \(hashed inputs, (\d+) training rows or more\): (\d+) "
                                              r"epochs?, with (\d+) held-out checks in it", text).groups())
    cfg = resolve(from_keywords(None), info(1000, "binary", rows), 2)
    assert cfg.epochs == epochs and cfg.eval_every == math.ceil(math.ceil(rows / cfg.batch) / checks)
    assert resolve(from_keywords(None), info(1000, "binary", rows - 1), 2).epochs > epochs      # a smaller table


def test_print_config_of_a_model_sets_the_options_given_over_its_own(tmp_path):
    write_tour_files(str(tmp_path))
    model = str(tmp_path / "m.npz")
    mp.train(str(tmp_path / "clicks.csv"), label="clicked", epochs=1, ensemble=1, hidden=(8,), model_out=model,
             quiet=True)
    r = run([sys.executable, "-m", "mpinn.train", "--print-config", model, "--epochs", "2", "--hidden", "32,16"])
    assert r.returncode == 0, r.stderr
    assert "with --epochs, --hidden from this command line" in r.stdout.splitlines()[0]
    toml = tmp_path / "run.toml"
    toml.write_text(r.stdout)
    cfg = from_argv(["--config", str(toml)])
    assert (cfg.epochs, cfg.hidden, cfg.label, cfg.ensemble) == (2, (32, 16), "clicked", 1)


def test_the_doctors_advice_names_the_option_and_the_option_does_it():
    r = run([sys.executable, "-m", "mpinn.doctor", "--hash-bits", "16", "--repeats", "2"])
    assert r.returncode == 0, r.stderr
    assert "(sparse)" in r.stdout
    (advice,) = re.findall(r"with the whole gradient allreduced instead \(([^)]*)\)", r.stdout)
    r = run([sys.executable, "-m", "mpinn.doctor", "--hash-bits", "16", "--repeats", "2"] + advice.split())
    assert r.returncode == 0, r.stderr
    assert "(dense)" in r.stdout and "instead" not in r.stdout          # taken: nothing left to advise


def test_too_many_ranks_on_a_host_names_how_many_it_has_room_for():
    records = [{"host": "a", "cpus": 2, "gpu": "none"}] * 3
    (note,) = host_notes(records)
    assert note.startswith("a: 3 ranks on 2 cores") and note.endswith("(at most -np 2 there, or fewer slots in the "
                                                                     "hostfile)")
