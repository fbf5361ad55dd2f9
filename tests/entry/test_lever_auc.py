"""scripts/bench/lever_auc.py's pure parts: an arm's parsing, the references, the summary's arithmetic and the
decision rule (within 0.001 of the reference at the same global batch), against values worked by hand; and
wire_auc's translation into lever_auc's arguments. No training here: the arms themselves are a benchmark."""
import argparse

import pytest

from scripts.bench import lever_auc as la
from scripts.bench import wire_auc


def test_an_arm_takes_its_batch_out_of_its_flags():
    a = la.parse_arm("sqrt=--batch 32768 --lr-scaling sqrt --warmup-steps 100", 8192)
    assert a == {"name": "sqrt", "batch": 32768, "flags": ["--lr-scaling", "sqrt", "--warmup-steps", "100"]}
    assert la.parse_arm("b=--batch=4096 --wire-rows bf16", 8192) == {"name": "b", "batch": 4096,
                                                                      "flags": ["--wire-rows", "bf16"]}
    assert la.parse_arm("plain=", 8192) == {"name": "plain", "batch": 8192, "flags": []}       # the default batch
    assert la.parse_arm("q=--extra 'a b'", 1)["flags"] == ["--extra", "a b"]                  # quoted as a shell would


@pytest.mark.parametrize("text", ["noequals", "=--batch 8", "a b=--batch 8", "a=--batch-size 8", "a=--batch 0"])
def test_a_bad_arm_is_refused(text):
    with pytest.raises(ValueError):
        la.parse_arm(text, 8192)


def arms(*spec):
    return [{"name": n, "batch": b, "flags": []} for n, b in spec]


def test_references_are_arms_and_one_a_batch():
    a = arms(("b8k", 8192), ("lr32k", 32768), ("sqrt", 32768))
    assert la.check_arms(a, ["b8k", "lr32k"]) == {8192: "b8k", 32768: "lr32k"}
    with pytest.raises(ValueError, match="not an arm"):
        la.check_arms(a, ["nope"])
    with pytest.raises(ValueError, match="two references at global batch 32768"):
        la.check_arms(a, ["lr32k", "sqrt"])
    with pytest.raises(ValueError, match="share a name"):
        la.check_arms(arms(("x", 1), ("x", 2)), ["x"])


def test_the_rule_passes_within_and_above_and_fails_below():
    assert la.verdict(0.0) == "within 0.001" and la.verdict(-0.0009) == "within 0.001"
    assert la.verdict(0.0011) == "better by more than 0.001"
    assert la.verdict(-0.0011) == "worse by more than 0.001"


def run(arm, seed, auc, logloss):
    return {"arm": arm, "seed": seed, "auc": auc, "logloss": logloss}


def test_summary_by_hand():
    a = arms(("b8k", 8192), ("lr32k", 32768), ("sqrt", 32768), ("lin", 32768), ("hi", 32768), ("big", 131072))
    runs = [run("b8k", 0, 0.800, 0.40), run("b8k", 1, 0.806, 0.42),                 # mean 0.803, spread 0.006
            run("lr32k", 0, 0.797, 0.41), run("lr32k", 1, 0.799, 0.41),             # mean 0.798
            run("sqrt", 0, 0.7975, 0.40), run("sqrt", 1, 0.7975, 0.40),             # 0.7975: -0.0005 of lr32k
            run("lin", 0, 0.796, 0.43), run("lin", 1, 0.796, 0.45),                 # 0.796: -0.002 of lr32k
            run("hi", 0, 0.800, 0.40),                                                # +0.002 of lr32k
            run("big", 0, 0.790, 0.5)]
    s = la.summary(runs, a, ["b8k", "lr32k"])
    assert s["b8k"]["auc_mean"] == pytest.approx(0.803) and s["b8k"]["auc_spread"] == pytest.approx(0.006)
    assert s["b8k"]["logloss_mean"] == pytest.approx(0.41) and s["b8k"]["seeds"] == [0, 1]
    assert s["lr32k"]["auc_minus_reference"] == pytest.approx(-0.005)          # the cost of the batch, at lr 1x
    assert s["lr32k"]["rule"] == "within 0.001" and s["lr32k"]["rule_reference"] == "lr32k"
    assert s["sqrt"]["auc_minus_reference"] == pytest.approx(-0.0055)
    assert s["sqrt"]["auc_minus_rule_reference"] == pytest.approx(-0.0005)    # judged at its own batch, not at 8k
    assert s["sqrt"]["may_be_default"] is True and s["sqrt"]["rule"] == "within 0.001"
    assert s["lin"]["auc_minus_rule_reference"] == pytest.approx(-0.002) and s["lin"]["may_be_default"] is False
    assert s["lin"]["rule"] == "worse by more than 0.001"
    assert s["hi"]["rule"] == "better by more than 0.001" and s["hi"]["may_be_default"] is True   # not "within"
    assert s["big"]["rule_reference"] is None and s["big"]["may_be_default"] is None    # no reference at 131k
    assert s["big"]["rule"] == "no reference at this batch"


def test_an_arm_without_runs_is_left_out_and_its_batch_not_judged():
    s = la.summary([run("sqrt", 0, 0.8, 0.4)], arms(("b8k", 8192), ("sqrt", 8192)), ["b8k"])
    assert list(s) == ["sqrt"]
    assert s["sqrt"]["auc_minus_reference"] is None and s["sqrt"]["may_be_default"] is None


def test_the_table_shows_each_arm_once_with_its_deltas():
    a = arms(("b8k", 8192), ("lr32k", 32768), ("sqrt", 32768))
    runs = [run("b8k", 0, 0.8, 0.4), run("lr32k", 0, 0.79, 0.41), run("sqrt", 0, 0.7895, 0.41)]
    lines = la.table(la.summary(runs, a, ["b8k", "lr32k"])).splitlines()
    assert lines[0].startswith("| arm | global batch |") and "AUC - b8k" in lines[0]
    assert lines[2] == "| b8k | 8192 | 0.80000 | 1 | 0.00000 | 0.40000 |  |  | reference |"
    assert lines[3] == "| lr32k | 32768 | 0.79000 | 1 | 0.00000 | 0.41000 | -0.01000 |  | reference |"
    assert lines[4] == "| sqrt | 32768 | 0.78950 | 1 | 0.00000 | 0.41000 | -0.01050 | -0.00050 (lr32k) | within 0.001 |"


def wire_args(**kw):
    base = dict(rows=None, test_rows=200000, batch=8192, steps=1000, seeds="0,1,2", arms="fp32,bf16", extra="",
                workdir=None, timeout=3600, out="o.json")
    return argparse.Namespace(**dict(base, **kw))


def test_wire_auc_is_lever_auc_with_an_arm_a_wire():
    argv = wire_auc.lever_argv(wire_args(rows=8192000))
    assert argv[argv.index("--reference") + 1] == "fp32"
    arm_texts = [argv[i + 1] for i, w in enumerate(argv) if w == "--arm"]
    assert [la.parse_arm(t, 1) for t in arm_texts] == [
        {"name": "fp32", "batch": 8192, "flags": ["--wire-rows", "fp32"]},
        {"name": "bf16", "batch": 8192, "flags": ["--wire-rows", "bf16"]}]
    with pytest.raises(ValueError, match="one pass"):                   # a second epoch over the rows: refused
        wire_auc.lever_argv(wire_args(rows=1000000))


def test_an_earlier_run_is_kept_only_when_this_sweep_would_make_it():
    args = argparse.Namespace(steps=1000, test_rows=200000, test_start=32768000, scale=100, data_seed=0)
    a = la.parse_arm("sqrt=--batch 32768 --lr-scaling sqrt", 8192)
    same = dict(la.key(a, args, 1), auc=0.8)
    other_flags = dict(same, flags="--lr-scaling linear")
    other_steps = dict(same, steps=500)
    other_test = dict(same, test_start=8192000)         # scored on other rows: not comparable
    gone = dict(la.key(la.parse_arm("gone=", 8192), args, 0), auc=0.8)
    assert la.prior_runs([same, other_flags, other_steps, other_test, gone], [a], args) == [same]
