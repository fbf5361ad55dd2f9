"""No output overwrites what the run reads, and no two outputs are one file: train's and predict's outputs against
their data, held-out file, config and model, by any name (./a, a link, a hard link), and a file written into a data
directory. Each is one line and exit 2 with every file as it was (before: predict --out DATA replaced the data with
the predictions; train --model-out M --metrics-out M kept the metrics and lost the model). And --valid names no
file that --data reads: a held-out metric on rows trained on."""
import hashlib
import os
import sys

import pytest

from conftest import run
from mpinn.core.errors import MpinnError
from mpinn.data.files import named
from mpinn.files.outputs import check_apart as apart


def check_apart(outputs, inputs):
    return apart(outputs, named(inputs))


def digest(folder):
    return {p: hashlib.sha256(open(os.path.join(folder, p), "rb").read()).hexdigest()
            for p in sorted(os.listdir(folder)) if os.path.isfile(os.path.join(folder, p))}


def test_an_output_that_is_an_input_by_any_name_is_refused(tmp_path):
    data = tmp_path / "d.csv"
    data.write_text("x,y\n1,0\n")
    os.symlink(data, tmp_path / "link.csv")
    os.link(data, tmp_path / "hard.csv")
    for name in ("d.csv", "link.csv", "hard.csv"):
        with pytest.raises(MpinnError, match="^--out .*%s is also --data: writing it would destroy" % name):
            check_apart([("--out", str(tmp_path / name), False)], [("--data", str(data))])
    with pytest.raises(MpinnError, match="is also --data"):         # one of several, named by a glob
        check_apart([("--out", str(data), False)], [("--data", [str(tmp_path / "*.csv")])])
    check_apart([("--out", str(tmp_path / "p.csv"), False)], [("--data", str(data)), ("--valid", None)])


def test_two_outputs_in_one_file_and_a_file_in_a_data_directory_are_refused(tmp_path):
    with pytest.raises(MpinnError, match="^--model-out and --metrics-out are both .*m.npz: each output needs"):
        check_apart([("--model-out", str(tmp_path / "m.npz"), False),
                     ("--metrics-out", str(tmp_path / "." / "m.npz"), False)], [])
    days = tmp_path / "days"
    days.mkdir()
    (days / "a.csv").write_text("x,y\n1,0\n")
    with pytest.raises(MpinnError, match="inside the data directory .*days \\(--data\\): the next run over"):
        check_apart([("--model-out", str(days / "m.npz"), False)], [("--data", str(days))])
    with pytest.raises(MpinnError, match="^--checkpoint-dir .*days is also --data"):
        check_apart([("--checkpoint-dir", str(days), True)], [("--data", str(days))])
    check_apart([("--checkpoint-dir", str(days / "ck"), True)], [("--data", str(days))])  # a folder in it: not read


def test_the_clis_refuse_with_one_line_and_change_nothing(tmp_path):
    lines = ["x,c,y"] + ["%d,%s,%d" % (i % 7, "abc"[i % 3], i % 2) for i in range(200)]
    (tmp_path / "d.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "v.csv").write_text("\n".join(lines[:50]) + "\n")
    train = [sys.executable, "-m", "mpinn.train", "--data", "d.csv", "--label", "y", "--epochs", "1", "--quiet"]
    r = run(train + ["--model-out", "m.npz"], cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    before = digest(tmp_path)
    cases = [(train + ["--model-out", "d.csv"], "--model-out d.csv is also --data"),
             (train + ["--valid", "v.csv", "--curve", "./v.csv"], "--curve ./v.csv is also --valid"),
             (train + ["--model-out", "m.npz", "--metrics-out", "m.npz"], "--model-out and --metrics-out are both m.npz"),
             (train + ["--valid", "./d.csv"], "--valid ./d.csv is also read as --data (d.csv): the held-out metric "
              "would be measured on rows trained on"),      # was accepted without a word
             (train[:4] + ["*.csv"] + train[5:] + ["--valid", "v.csv"], "--valid v.csv is also read as --data"),
             ([sys.executable, "-m", "mpinn.predict", "--model", "m.npz", "--data", "d.csv", "--out", "d.csv"],
              "--out d.csv is also --data"),
             ([sys.executable, "-m", "mpinn.predict", "--model", "m.npz", "--data", "d.csv", "--out", "m.npz"],
              "--out m.npz is also --model")]
    for cmd, message in cases:
        r = run(cmd, cwd=str(tmp_path))
        assert r.returncode == 2, (cmd, r.stderr)
        assert r.stderr.strip().splitlines() == ["mpinn: error: %s" % r.stderr.strip()[len("mpinn: error: "):]]
        assert message in r.stderr, r.stderr
    assert digest(tmp_path) == before
