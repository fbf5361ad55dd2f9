"""The fuzz harness through the real CLIs: generated bad files for every reader (CSV and .csv.gz, Parquet, .npz, .mat,
packed .mpinn, click-log text) and bad option sets (tests/entry/fuzz_cases.py), each trained on with
`python -m mpinn.train` at np 1 and under mpiexec at np 2, and damaged models and data given to predict. The
property, for every run: exit 0 with a model file that loads (predict: its predictions), or exit 2 with one line on
stderr and no model; never a hang (each run has a timeout), a traceback, a warning, an abort, or a temporary or
partial file left behind, and a model file that was there before a failed run is as it was.

MPINN_FUZZ_CASES (default 24: three of each kind, about 35 s here; the suite stays under 12 minutes) sets the number of cases,
MPINN_FUZZ_SEED (default 0) which ones: MPINN_FUZZ_CASES=500 python -m pytest tests/entry/test_fuzz_cli.py."""
import os
import sys

import pytest

from conftest import mpirun, run
from fuzz_cases import KINDS, make_case

CASES = int(os.environ.get("MPINN_FUZZ_CASES", "24"))
SEED = int(os.environ.get("MPINN_FUZZ_SEED", "0"))
OLD = b"a model file from before"


@pytest.fixture(scope="module")
def trained_model(tmp_path_factory):
    """A model trained on a good CSV, for predict's cases."""
    import numpy as np
    d = tmp_path_factory.mktemp("fuzz-model")
    rng = np.random.default_rng(0)
    with open(d / "good.csv", "w") as f:
        f.write("y,a,b,x\n" + "".join("%d,v%d,%d,%.4f\n" % (rng.integers(0, 2), rng.integers(0, 7), rng.integers(0, 4),
                                                          rng.standard_normal()) for _ in range(200)))
    r = run([sys.executable, "-m", "mpinn.train", "--data", str(d / "good.csv"), "--label", "y", "--epochs", "1",
             "--no-progress", "--quiet", "--model-out", str(d / "m.npz")])
    assert r.returncode == 0, r.stderr
    return d / "m.npz"


def leftovers(root):
    """Temporary files anywhere under root (the writers' .tmp-*, a STOPPED.tmp)."""
    return [os.path.join(d, n) for d, _, names in os.walk(root) for n in names
            if n.startswith(".tmp") or n.endswith(".tmp")]


def holds(r, what, ok, failed_clean):
    """The property for one finished run (r): what names the case for the failure message."""
    why = "%s\nexit %d\nstdout: %s\nstderr: %s" % (what, r.returncode, r.stdout[-1500:], r.stderr[-3000:])
    assert "Traceback" not in r.stderr and "Abort(" not in r.stderr, why
    if r.returncode == 0:
        assert r.stderr == "", why                  # no warning either
        ok()
    else:
        assert r.returncode == 2, why
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("mpinn: error") and len(lines[0]) < 2000, why
        failed_clean()


def train_case(args, out, n, what, tmp_path):
    out.mkdir()
    model = out / "m.npz"
    keep = n == 2                   # at np 2 a model file is there before the run: a failed run leaves it
    if keep:
        model.write_bytes(OLD)
    cmd = ["-m", "mpinn.train", "--no-progress", "--epochs", "2", "--model-out", str(model)] + [str(a) for a in args]
    env = {"TMPDIR": str(tmp_path / "tmp")}
    r = mpirun(n, cmd, 90, env, cwd=str(out)) if n > 1 else run([sys.executable] + cmd, 90, env, cwd=str(out))

    def ok():
        from mpinn.files.checkpoint import load_model
        params, spec, _ = load_model(str(model))
        assert params.shape[-1] == spec.n_params, what

    def failed_clean():
        assert (model.read_bytes() == OLD) if keep else not model.exists(), what
    holds(r, what + " at np %d" % n, ok, failed_clean)


def predict_case(args, what):
    out = [str(a) for a in args][args.index("--out") + 1]
    r = run([sys.executable, "-m", "mpinn.predict"] + [str(a) for a in args], 90)

    def ok():
        assert open(out).readline().rstrip("\n").split(",")[-2:][0] in ("prediction", "row") or \
            "prediction" in open(out).readline(), what

    def failed_clean():
        assert not os.path.exists(out), what
    holds(r, what, ok, failed_clean)


@pytest.mark.mpi
@pytest.mark.parametrize("case", range(CASES))
def test_a_bad_input_is_a_model_or_one_line(case, tmp_path, trained_model, launcher):
    kind, seed = KINDS[case % len(KINDS)], SEED * 100_000 + case // len(KINDS)
    (tmp_path / "tmp").mkdir()
    args = make_case(kind, seed, tmp_path, trained_model)
    what = "case %s seed %d (MPINN_FUZZ_SEED=%d, case %d): %s" % (kind, seed, SEED, case,
                                                                 " ".join(str(a)[:80] for a in args))
    if kind == "predict":
        predict_case(args, what)
    else:
        for n in (1, 2):
            train_case(args, tmp_path / ("np%d" % n), n, what, tmp_path)
    assert not leftovers(tmp_path), (what, leftovers(tmp_path))
