"""--classes names every class, in the order of the model's outputs: a stream whose sample lacks a class (a file
sorted by its label) trains with it, where without it the class first met later is one line naming --classes;
in memory, the outputs come in the named order; two classes make a binary task with the second as 1."""
import os
import sys

import numpy as np
import pytest

from conftest import mpirun, run


def sorted_by_label(path, n=3000, seed=0):
    """A CSV whose label (a, b or c, then d in the last rows only) follows x: sorted, as an export often is."""
    rng = np.random.default_rng(seed)
    x = np.sort(rng.normal(size=n))
    label = np.where(x < -0.5, "a", np.where(x < 0.5, "b", "c")).astype(object)
    label[-100:] = "d"
    with open(path, "w") as f:
        f.write("x,z,label\n")
        for xi, zi, li in zip(x, rng.normal(size=n), label):
            f.write("%.5f,%.5f,%s\n" % (xi, zi, li))
    return x, label


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_class_the_stream_sample_lacks_needs_classes_and_trains_with_them(tmp_path, n, launcher):
    data, out = str(tmp_path / "sorted.csv"), str(tmp_path / "m.npz")
    sorted_by_label(data)
    base = ["-m", "mpinn.train", "--data", data, "--label", "label", "--stream", "on", "--sample-rows", "1000",
            "--epochs", "1", "--hidden", "8", "--no-progress", "--model-out", out]
    r = mpirun(n, base)
    assert r.returncode == 2, r.stdout[-2000:]
    err = [line for line in r.stderr.splitlines() if line.strip()]
    assert "label 'c' is not one of the model's classes ['a', 'b']" in err[0], r.stderr
    assert "name every class with --classes" in err[0] and "Traceback" not in r.stderr and not os.path.exists(out)
    r = mpirun(n, base + ["--classes", "d,c,b,a"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert "task multiclass" in r.stdout
    pred = str(tmp_path / "p.csv")
    r = run([sys.executable, "-m", "mpinn.predict", "--model", out, "--data", data, "--out", pred])
    assert r.returncode == 0, r.stderr
    assert [c for c in open(pred).readline().rstrip().split(",") if c.startswith("p_")] == ["p_d", "p_c", "p_b", "p_a"]


def test_in_memory_the_outputs_follow_the_named_order_and_two_are_binary(tmp_path):
    data, out, pred = str(tmp_path / "t.csv"), str(tmp_path / "m.npz"), str(tmp_path / "p.csv")
    x, label = sorted_by_label(data, n=600)
    common = ["-m", "mpinn.train", "--data", data, "--label", "label", "--epochs", "1", "--ensemble", "1",
              "--hidden", "8", "--no-progress", "--model-out", out]
    r = run([sys.executable] + common + ["--classes", "c, a,d,b"])       # spaces are trimmed
    assert r.returncode == 0, r.stderr
    run([sys.executable, "-m", "mpinn.predict", "--model", out, "--data", data, "--out", pred])
    assert [c for c in open(pred).readline().rstrip().split(",") if c.startswith("p_")] == ["p_c", "p_a", "p_d", "p_b"]
    two = str(tmp_path / "two.csv")
    with open(two, "w") as f:
        f.write("x,label\n" + "".join("%.5f,%s\n" % (xi, "no" if xi < 0 else "yes") for xi in x))
    for extra, positive in ((["--classes", "yes,no"], "no"), (["--classes", "yes,no", "--positive-class", "yes"],
                                                              "yes")):
        r = run([sys.executable] + common[:3] + [two] + common[4:] + extra)
        assert r.returncode == 0, r.stderr
        assert "task binary (positive class %r)" % positive in r.stdout


@pytest.mark.parametrize("extra, message", [
    (["--classes", "a"], "--classes: wants two or more labels, comma-separated, not 'a'"),
    (["--classes", "a,,b"], "--classes: wants two or more labels"),
    (["--classes", "a,b,a"], "--classes: names a twice"),
    (["--classes", "a,b", "--task", "regression"], "--classes names a classification's labels: the task is "
                                                   "regression"),
    (["--classes", "a,b,c", "--task", "binary"], "--task binary has two classes; --classes names another number"),
    (["--classes", "a,b", "--positive-class", "c"], "--positive-class c is not one of --classes a,b"),
])
def test_bad_classes_are_one_line_and_exit_2(tmp_path, extra, message):
    data = str(tmp_path / "t.csv")
    sorted_by_label(data, n=100)
    r = run([sys.executable, "-m", "mpinn.train", "--data", data, "--label", "label", "--model-out",
             str(tmp_path / "m.npz")] + extra)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "m.npz")


def test_a_label_outside_the_named_classes_is_one_line(tmp_path):
    data = str(tmp_path / "t.csv")
    sorted_by_label(data, n=300)
    r = run([sys.executable, "-m", "mpinn.train", "--data", data, "--label", "label", "--classes", "a,b,c",
             "--model-out", str(tmp_path / "m.npz")])
    assert r.returncode == 2 and "label 'd' is not one of the model's classes ['a', 'b', 'c']" in r.stderr, r.stderr
