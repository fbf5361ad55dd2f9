"""The run configuration's second step (mpinn.settings.resolve): what the data decides, where each value came
from, and that a configuration is never changed once made."""
import dataclasses

import pytest

from mpinn.core.batch import Layout
from mpinn.data.info import DataInfo
from mpinn.settings import from_keywords, resolve
from mpinn.settings.shapes import SHAPES


RANKS = 2


def info(n_sparse=1000, task="binary", n_train=50_000, has_valid=True):
    return DataInfo({"task": task}, Layout(n_sparse, 3, "float32", "float32"), 1, 5.0, n_train, has_valid)


def test_the_data_decides_what_was_left_to_it_and_says_so():
    cfg = resolve(from_keywords(None, epochs=7), info(), RANKS)
    wide = SHAPES["wide"]
    assert (cfg.optimizer, cfg.lr, cfg.wide, cfg.loss, cfg.task) == (wide["optimizer"], wide["lr"], "on", "sigmoid",
                                                                     "binary")
    assert cfg.batch_size == 128 and cfg.batch == 128                 # 50,000 / 250 rounded down, at least 128
    assert cfg.where("optimizer") == "data" and cfg.where("epochs") == "given" and cfg.where("seed") == "default"
    assert cfg.stage == "resolved"


def test_epochs_given_means_that_many_unless_early_stop_is_given_too():
    assert resolve(from_keywords(None, epochs=7), info(), RANKS).early_stop == 0
    assert resolve(from_keywords(None, epochs=7, early_stop=2), info(), RANKS).early_stop == 2
    cfg = resolve(from_keywords(None), info(), RANKS)
    assert (cfg.epochs, cfg.early_stop) == (SHAPES["wide"]["epochs"], SHAPES["wide"]["early_stop"])
    assert resolve(from_keywords(None), info(has_valid=False), RANKS).keep == "last"


def test_the_linear_part_is_on_with_hashed_inputs_and_hidden_layers_only():
    assert resolve(from_keywords(None), info(), RANKS).wide == "on"
    assert resolve(from_keywords(None), info(n_sparse=0), RANKS).wide == "off"
    assert resolve(from_keywords(None, hidden=()), info(), RANKS).wide == "off"
    assert resolve(from_keywords(None, wide="off"), info(), RANKS).wide == "off"


def test_hidden_widths_are_read_as_typed_or_refused():
    """'' is a linear model; an empty width between commas is refused, not dropped ('64,,32' was read as 64,32)."""
    from mpinn.settings import from_argv
    assert from_argv(["--hidden", "64, 32"]).hidden == (64, 32) and from_argv(["--hidden", ""]).hidden == ()
    for bad in ("64,,32", "64,", ",8", "8,0", "8;4"):
        with pytest.raises(SystemExit) as e:
            from_argv(["--hidden", bad])
        assert e.value.code == 2, bad


def test_a_configuration_is_never_changed_once_made():
    cfg = from_keywords(None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.epochs = 3
    resolved = resolve(cfg, info(), RANKS)
    assert cfg.optimizer is None and cfg.stage == "given" and resolved is not cfg


def test_a_log_is_one_pass_with_held_out_checks_inside_it_and_a_small_table_several_epochs():
    """Hashed inputs and LOG_ROWS training rows or more: one epoch, LOG_POINTS evaluations in it (--eval-every),
    unless --epochs or --eval-every is given; a smaller hashed table, or numbers only, keep the shape's epochs."""
    from mpinn.settings.shapes import LOG_POINTS, LOG_ROWS
    log = resolve(from_keywords(None), info(n_train=180_000), RANKS)
    steps = -(-180_000 // log.batch)                    # 512 a batch: 352 steps
    assert (log.epochs, log.early_stop, log.eval_every) == (1, 0, -(-steps // LOG_POINTS))
    assert log.where("epochs") == "data" and log.where("eval_every") == "data"
    small = resolve(from_keywords(None), info(n_train=LOG_ROWS - 1), RANKS)
    assert (small.epochs, small.eval_every) == (SHAPES["wide"]["epochs"], 0)
    dense = resolve(from_keywords(None), info(n_sparse=0, n_train=10 ** 6), RANKS)
    assert dense.epochs == SHAPES["dense"]["epochs"]
    assert resolve(from_keywords(None, epochs=3), info(n_train=10 ** 6), RANKS).epochs == 3
    assert resolve(from_keywords(None, eval_every=7), info(n_train=10 ** 6), RANKS).eval_every == 7
    assert resolve(from_keywords(None), info(n_train=10 ** 6, has_valid=False), RANKS).eval_every == 0


def test_a_small_table_is_an_ensemble_of_five_and_a_log_a_wide_table_or_pixels_one_model():
    """--ensemble left to the data: 5 below LOG_ROWS training rows, 10 million numeric values and 2 million
    parameters a model (with --parallel data), 1 otherwise; given, it is kept."""
    def ensemble(n_sparse=1000, n_dense=3, n_train=50_000, **options):
        data = DataInfo({"task": "binary"}, Layout(n_sparse, n_dense, "float32", "float32"), 1, 5.0, n_train, True)
        cfg = resolve(from_keywords(None, **options), data, RANKS)
        return cfg.ensemble, cfg.where("ensemble")
    assert ensemble() == (5, "data")                                   # 1003 inputs x 64: 64k parameters
    assert ensemble(n_train=99_999)[0] == 5 and ensemble(n_train=100_000)[0] == 1      # a log: one model
    assert ensemble(n_sparse=0, n_dense=784, n_train=54_000)[0] == 1    # 60,000 images: 42 million values
    assert ensemble(n_sparse=0, n_dense=200, n_train=50_000)[0] == 5    # exactly 10 million
    assert ensemble(n_sparse=0, n_dense=201, n_train=50_000)[0] == 1
    # (n_sparse + 3) x 64 + 64 + (64 + 1) + (n_sparse + 3) for the linear part: 2^15 hashed columns are 2.1 million
    assert ensemble(n_sparse=2 ** 14)[0] == 5 and ensemble(n_sparse=2 ** 15)[0] == 1
    assert ensemble(parallel="tower")[0] == 1
    streamed = DataInfo({"task": "binary"}, Layout(1000, 3, "float32", "float32"), 1, 5.0, 50_000, True, True)
    assert resolve(from_keywords(None), streamed, RANKS).ensemble == 1         # a stream is read again per member
    assert ensemble(ensemble=3) == (3, "given") and ensemble(n_train=500_000, ensemble=2) == (2, "given")


def test_the_embedding_trial_needs_enough_held_out_rows_of_every_class(monkeypatch):
    """--numeric-embedding auto tries periodic embeddings (an ensemble, 10,000 training rows, 2..64 numeric
    columns) only where the held-out rows hold EMBED_MIN_RARE rows of every class: 9 held-out clicks chose them
    on an Open Bandit sample. The count is numpy's bincount's, chunk by chunk, of the held-out labels."""
    import numpy as np
    from mpinn.data.info import rarest_class
    from mpinn.settings.shapes import EMBED_MIN_RARE

    def embedding(rarest, task="binary"):
        meta = {"task": task, "transform": {"columns": ["a", "b", "c"]}, "classes": ["x", "y", "z"]}
        data = DataInfo(meta, Layout(1000, 3, "float32", "float32"), 1 if task != "multiclass" else 3, 5.0, 20_000,
                        True, held_out_rarest=rarest)
        return resolve(from_keywords(None), data, RANKS).numeric_embedding
    assert embedding(EMBED_MIN_RARE) == "auto" and embedding(None) == "auto"        # tried by the ensemble
    assert embedding(EMBED_MIN_RARE - 1) == "off" and embedding(9, "multiclass") == "off"

    class Held:
        y = np.random.default_rng(0).choice(3, size=5000, p=[0.6, 0.39, 0.01])

        def __len__(self):
            return len(self.y)
    counts = np.bincount(Held.y, minlength=4)
    assert rarest_class(Held(), {"task": "multiclass", "classes": list("abc")}, chunk=777) == counts[:3].min()
    assert rarest_class(Held(), {"task": "multiclass", "classes": list("abcd")}) == 0       # a class never held out
    Held.y = (Held.y > 0).astype(float)
    assert rarest_class(Held(), {"task": "binary"}, chunk=100) == min(counts[0], counts[1] + counts[2])
    assert rarest_class(Held(), {"task": "regression"}) is None and rarest_class(None, {"task": "binary"}) is None
    from mpinn.data import info
    monkeypatch.setattr(info, "COUNTED_HELD_OUT", 4999)      # a larger held-out set is not gathered to be counted
    assert rarest_class(Held(), {"task": "binary"}) is None
