"""An output a run cannot make is one line and exit 2 before anything is read: the check tries what the run will do
(make a file, make a directory) rather than reading permissions, which /proc and /sys grant and then refuse; a
directory that still cannot be made later is one line naming it."""
import os
import sys

import pytest

from conftest import run
from mpinn.core.errors import MpinnError
from mpinn.files.outputs import check_dir, check_file, made_parent

# /proc and /sys: os.access says writable (to root), then mkdir and open refuse (ENOENT, EPERM, EACCES)
REFUSING = [p for p in ("/proc", "/sys") if os.path.isdir(p)]
TRAIN = [sys.executable, "-m", "mpinn.train", "--default-rows", "400", "--hash-bits", "8", "--hidden", "4",
         "--epochs", "1", "--ensemble", "1", "--quiet"]


@pytest.mark.parametrize("root", REFUSING)
@pytest.mark.parametrize("option,name", [("--log-dir", "tb"), ("--checkpoint-dir", "ck"), ("--model-out", "m.npz"),
                                         ("--curve", "c.csv"), ("--metrics-out", "m.json"), ("--plot", "p.png"),
                                         ("--timeline", "t.json"), ("--log-dir", "new/tb")])
def test_an_output_under_proc_or_sys_is_one_line_before_training(tmp_path, root, option, name):
    """Before: the check passed, training ran, and makedirs or open raised (a traceback, exit 1), or the model went
    to a temporary file instead."""
    target = os.path.join(root, name)
    r = run(TRAIN + [option, target] + ([] if option == "--model-out" else ["--model-out", str(tmp_path / "m.npz")]),
            cwd=str(tmp_path))
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert r.stderr.startswith("mpinn: error: %s %s cannot be " % (option, target)), r.stderr
    assert r.stderr.count("\n") == 1 and " cannot be written (" in r.stderr, r.stderr
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("root", REFUSING)
@pytest.mark.parametrize("module", ["mpinn.predict", "mpinn.prepare"])
def test_predict_and_prepare_out_under_proc_or_sys_is_one_line(tmp_path, root, module):
    (tmp_path / "d.csv").write_text("a,y\n1,0\n2,1\n3,0\n4,1\n")
    args = ["--model", str(tmp_path / "none.npz")] if module == "mpinn.predict" else ["--label", "y"]
    out = os.path.join(root, "o.csv" if module == "mpinn.predict" else "o.mpinn")
    r = run([sys.executable, "-m", module, "--data", str(tmp_path / "d.csv"), "--out", out] + args)
    assert r.returncode == 2 and r.stderr.startswith("mpinn: error: --out %s cannot be written: %s cannot be written ("
                                                     % (out, root)), r.stderr


def test_the_check_leaves_nothing_behind(tmp_path):
    check_dir(str(tmp_path / "a" / "b"), "--log-dir")
    check_file(str(tmp_path / "m.npz"), "--model-out")
    check_dir(str(tmp_path), "--checkpoint-dir")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("root", REFUSING)
def test_a_directory_that_cannot_be_made_later_is_one_line_naming_it(root):
    with pytest.raises(MpinnError, match=r"^the directory %s/new could not be made \(" % root):
        made_parent(os.path.join(root, "new", "c.csv"))
