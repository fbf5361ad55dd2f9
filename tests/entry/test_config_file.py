"""--config FILE.toml and --print-config: a run given as a file equals the same run given as flags, bit for bit; a
model's printed options, given back, train the same model at np 1 and 2; the command line overrides the file; a bad
file is one line and exit 2."""
import json
import sys

import numpy as np
import pytest

from conftest import mpirun, run
from mpinn.core.errors import MpinnError
from mpinn.settings import GIVEN, from_argv, from_keywords
from mpinn.settings.config_file import OUTPUTS, PRINTING, config_toml
from mpinn.settings.table import OPTIONS

# a value unlike the default for options of every kind: floats that print with many digits, an empty list, text that
# TOML must escape, flags, numbers given as text
VARIED = dict(lr=0.1234567890123, momentum=0.3, weight_decay=1e-05, hidden=(), categorical="a,b", numeric="n",
              positive_class='say "yes" \u00fc\t\\', hot_rows="100", buckets="a=3,b=4", holdout_by="time:day",
              hash_bits=12, epochs=7, seed=2 ** 40 + 3, overlap=True, no_progress=True, optimizer="ftrl", l1=2.5,
              lr_decay="cosine", dtype="float64", sparse_threshold=0.0, label="y")


@pytest.mark.parametrize("options", [{}, VARIED], ids=["defaults", "varied"])
def test_every_option_comes_back_from_its_file(tmp_path, options):
    """Every option written as given comes back with the same value (the outputs and how the run printed are
    written as comments)."""
    cfg = from_keywords(None, **options)
    path = tmp_path / "run.toml"
    path.write_text(config_toml(cfg.options(), {f.name: GIVEN for f in OPTIONS}, "a test"))
    back = from_keywords(None, config=str(path))
    for f in OPTIONS:
        if f.name not in OUTPUTS + PRINTING + ("config",):
            assert getattr(back, f.name) == getattr(cfg, f.name), f.name
            assert back.where(f.name) == (GIVEN if getattr(cfg, f.name) is not None else "default"), f.name


def test_the_command_line_overrides_the_file(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('data = "a.csv"\nepochs = 3\nhidden = [8]\nbatch-size = 64\nquiet = true\n')
    cfg = from_argv(["b.csv", "--config", str(path), "--epochs", "1"])
    assert (cfg.data, cfg.epochs, cfg.hidden, cfg.batch_size, cfg.quiet) == ("b.csv", 1, (8,), 64, True)
    assert cfg.where("batch_size") == GIVEN and cfg.where("lr") == "default"


def test_the_api_takes_a_file_too(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("epochs = 3\nhidden = [8, 4]\n")
    cfg = from_keywords(None, config=str(path), epochs=5)
    assert (cfg.epochs, cfg.hidden) == (5, (8, 4))
    path.write_text("epochs = 0\n")
    with pytest.raises(MpinnError, match="epochs: must be a positive integer"):
        from_keywords(None, config=str(path))


@pytest.mark.parametrize("text,message", [
    ("hiden = [8]\n", "unknown option 'hiden' (did you mean 'hidden'?)"),
    ("epochs = 2.5\n", "epochs: must be a positive integer, not 2.5"),
    ('epochs = "three"\n', "epochs: must be a positive integer, not three"),
    ("activation = \"relux\"\n", "activation: invalid choice: 'relux'"),
    ("quiet = \"yes\"\n", "quiet is true or false"),
    ("wide = true\n", "wide takes a value, not true"),
    ("epochs = \n", "is not a TOML file"),
    ("[model]\nhidden = [8]\n", "unknown option 'model'"),
    ("batch_size = 64\n", "give --batch-size (global) or --batch-per-rank, not both"),      # the rules see the merge
])
def test_a_bad_file_is_one_line_and_exit_2(tmp_path, text, message):
    path = tmp_path / "run.toml"
    path.write_text(text)
    r = run([sys.executable, "-m", "mpinn.train", "--config", str(path), "--batch-per-rank", "8",
             "--model-out", str(tmp_path / "m.npz")], timeout=60)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "m.npz").exists()


def test_a_missing_file_and_a_file_that_is_no_model_are_one_line(tmp_path):
    for args, message in ((["--config", str(tmp_path / "no.toml")], "cannot read it"),
                          (["--print-config", str(tmp_path / "no.npz")], "does not exist")):
        r = run([sys.executable, "-m", "mpinn.train"] + args, timeout=60)
        assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """A CSV with a categorical column (hashed), a numeric one and a binary label."""
    path = tmp_path_factory.mktemp("config") / "t.csv"
    rng = np.random.default_rng(1)
    city, x = rng.choice(["oslo", "rome", "lima", "doha"], 1500), rng.standard_normal(1500)
    y = (np.isin(city, ["oslo", "rome"]) ^ (x > 0.3)).astype(int)
    path.write_text("city,x,y\n" + "".join("%s,%.5f,%d\n" % row for row in zip(city, x, y)))
    return str(path)


FLAGS = ["--label", "y", "--categorical", "city", "--numeric", "x", "--hidden", "8,4", "--epochs", "2", "--lr", "0.03",
         "--optimizer", "adam", "--batch-size", "64", "--hash-bits", "10", "--seed", "3", "--no-progress"]
TOML = ('label = "y"\ncategorical = "city"\nnumeric = ["x"]\nhidden = [8, 4]\nepochs = 2\nlr = 0.03\n'
        'optimizer = "adam"\nbatch-size = 64\nhash_bits = 10\nseed = 3\nno_progress = true\n')


def arrays(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files if k != "header"}


def same_arrays(a, b):
    a, b = arrays(a), arrays(b)
    return sorted(a) == sorted(b) and all(a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.mpi
def test_a_run_given_as_a_file_equals_it_given_as_flags(tmp_path, table, launcher):
    (tmp_path / "run.toml").write_text(TOML)
    flags = mpirun(1, ["-m", "mpinn.train", table, "--model-out", str(tmp_path / "a.npz")] + FLAGS)
    filed = mpirun(1, ["-m", "mpinn.train", table, "--config", str(tmp_path / "run.toml"),
                       "--model-out", str(tmp_path / "b.npz")])
    assert flags.returncode == 0 and filed.returncode == 0, flags.stderr + filed.stderr
    assert same_arrays(tmp_path / "a.npz", tmp_path / "b.npz")
    with np.load(tmp_path / "b.npz") as z:      # the file's options were used (not the defaults)
        header = json.loads(str(z["header"][()]))
    assert header["spec"]["hidden"] == [8, 4] and header["meta"]["config"]["optimizer"] == "adam"


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2])
def test_a_models_printed_options_train_the_same_model(tmp_path, table, n, launcher):
    first = mpirun(n, ["-m", "mpinn.train", table, "--model-out", str(tmp_path / "a.npz")] + FLAGS)
    assert first.returncode == 0, first.stderr
    printed = run([sys.executable, "-m", "mpinn.train", "--print-config", str(tmp_path / "a.npz")], timeout=60)
    assert printed.returncode == 0, printed.stderr
    assert "hidden = [8, 4]" in printed.stdout and '# model_out = "%s"' % (tmp_path / "a.npz") in printed.stdout
    assert "\n# no_progress = true" in printed.stdout      # how it printed: a flag a later command line cannot undo
    (tmp_path / "again.toml").write_text(printed.stdout)
    again = mpirun(n, ["-m", "mpinn.train", "--config", str(tmp_path / "again.toml"),
                       "--model-out", str(tmp_path / "b.npz")])
    assert again.returncode == 0, again.stderr
    assert same_arrays(tmp_path / "a.npz", tmp_path / "b.npz")
