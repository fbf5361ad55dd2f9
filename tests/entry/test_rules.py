"""The rule table (mpinn.settings.rules): every refused combination of options ends the run with its own
one-line message and exit code 2 before any data is read. Each rule's example is run as
`python -m mpinn.train --data PIPE ...` (in this process, tests/launch.py) where PIPE is a named pipe watched by a
tripwire: a run that opens it for reading is caught (and let go with an empty pipe, not left to block)."""
import errno
import os
import shlex
import sys
import threading

import pytest

from conftest import run
from mpinn.core.errors import MpinnError
from mpinn.settings import RULES, check, from_argv
from mpinn.settings.table import OPTIONS

NAMES = {f.name for f in OPTIONS}


class Tripwire:
    """A named pipe that notes whether anyone opened it to read: a thread tries to open its writing end without
    blocking (ENXIO while nobody reads), and when that works closes it again, so the reader sees an empty file."""

    def __init__(self, path):
        self.path, self.opened, self._done = path, False, threading.Event()
        os.mkfifo(path)
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self):
        while not self._done.wait(0.002):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as e:
                if e.errno != errno.ENXIO:
                    raise
                continue
            self.opened = True
            os.close(fd)

    def close(self):
        self._done.set()
        self._thread.join()


def rule_argv(rule, data):
    """The rule's example on `data`: a CSV gets a label too, all it needs (without the rule the run would read it)."""
    argv = ["--data", str(data)] + shlex.split(rule.example)
    return argv + ["--label", "y"] if rule.data.endswith(".csv") and "--label" not in argv else argv


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_every_rule_is_refused_before_the_data_is_opened(rule, tmp_path):
    pipe = Tripwire(tmp_path / rule.data)
    argv = rule_argv(rule, pipe.path)
    with pytest.raises(MpinnError) as e:
        check(from_argv(argv, raise_errors=True))
    message = str(e.value)
    assert message == rule.message.format(c=from_argv(argv, raise_errors=True), _s=rule.data.rsplit(".", 1)[1])
    try:
        r = run([sys.executable, "-m", "mpinn.train"] + argv + ["--model-out", str(tmp_path / "m.npz")], timeout=15)
    finally:
        pipe.close()
    assert r.returncode == 2, r.stderr
    assert r.stderr == "mpinn: error: %s\n" % message, r.stderr
    assert not pipe.opened, "the data was opened before the rule refused the run"
    assert not (tmp_path / "m.npz").exists()


@pytest.mark.launch
def test_a_refused_run_as_a_real_process_ends_with_the_line_and_code_2(tmp_path):
    """The process wrapper for the rules: one real `python -m mpinn.train`, refused by its first rule without opening
    its named pipe (the in-process runs above check every rule's line)."""
    rule = RULES[0]
    pipe = Tripwire(tmp_path / rule.data)
    argv = rule_argv(rule, pipe.path)
    message = rule.message.format(c=from_argv(argv, raise_errors=True), _s=rule.data.rsplit(".", 1)[1])
    try:
        r = run([sys.executable, "-m", "mpinn.train"] + argv + ["--model-out", str(tmp_path / "m.npz")], timeout=30,
                process=True)
    finally:
        pipe.close()
    assert (r.returncode, r.stderr) == (2, "mpinn: error: %s\n" % message)
    assert not pipe.opened and not (tmp_path / "m.npz").exists()


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_every_rule_names_real_options_and_is_not_broken_by_the_defaults(rule):
    assert set(rule.options) <= NAMES, set(rule.options) - NAMES
    check(from_argv([]))                                # the defaults break no rule
    assert "{" not in rule.message.replace("{c.", "").replace("{_s}", "")


def test_the_rule_names_are_unique():
    names = [r.name for r in RULES]
    assert len(names) == len(set(names))


def test_a_rule_on_an_option_left_to_the_data_waits_for_it():
    """--l1 with no --optimizer: the model shape picks the optimizer, so the rule is checked once it has."""
    check(from_argv(["--l1", "0.1"]))
    from dataclasses import replace
    with pytest.raises(MpinnError, match="act on --optimizer ftrl only; this run's optimizer is sgd"):
        check(replace(from_argv(["--l1", "0.1"]), optimizer="sgd"))


def test_a_sharded_table_needs_hashed_inputs_which_only_the_data_tells(tmp_path):
    import numpy as np
    path = tmp_path / "dense.npz"
    rng = np.random.default_rng(0)
    np.savez(path, X=rng.standard_normal((64, 3)), y=rng.integers(0, 2, 64))
    r = run([sys.executable, "-m", "mpinn.train", "--data", str(path), "--table", "sharded", "--epochs", "1",
             "--model-out", str(tmp_path / "m.npz")], timeout=120)
    assert r.returncode == 2 and r.stderr.endswith("this model has no hashed inputs\n"), r.stderr
    assert not (tmp_path / "m.npz").exists()


def test_the_option_reference_page_is_made_from_the_table():
    """docs/options.md is generated from the same table as --help: it cannot drift from the code."""
    from conftest import ROOT
    from mpinn.settings.parse import reference_markdown
    with open(os.path.join(ROOT, "docs", "options.md")) as f:
        assert f.read() == reference_markdown(), "python scripts/options_reference.py --write"
