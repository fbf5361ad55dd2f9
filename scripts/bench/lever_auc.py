"""What a lever costs in model quality on W4 (issue 63, item 6): arms trained the same number of steps, one pass over
fresh rows each, from a packed file, scored on the same test rows (test AUC and logloss), over several seeds.

    python -m scripts.bench.lever_auc --steps 1000 --test-rows 200000 --seeds 0,1,2 --reference b8k,lr32k \\
        --arm b8k="--batch 8192" --arm lr32k="--batch 32768" \\
        --arm sqrt32k="--batch 32768 --lr-scaling sqrt --lr-base-batch 8192 --warmup-steps 100" \\
        --out scripts/results/batch-auc.json

An arm is NAME="FLAGS": FLAGS are mpinn.train options, and --batch N (its global batch, --batch-size; default
--batch). Every arm runs --steps steps in one epoch over the log's first steps x batch rows (one pass, never a row
twice), so a larger batch reads more rows. The test rows are the log's next --test-rows rows after the longest arm's
training rows: the same rows for every arm, next in time for the longest, later for the shorter ones.

--reference names the arms the others are compared with: the first gives every arm's AUC delta; each one is the
decision reference of its own global batch (at most one a batch). Decision rule (the issue's): a lever may be a
default only when its mean test AUC over the seeds is within 0.001 of its batch's reference (a better mean passes
too); an arm at a batch with no reference is not judged.

Measured in one process (np 1, --table sharded), as scripts/bench/wire_auc.py did: P ranks at the same global batch
compute the same step (tests/training/mpi_sharded.py). The data: W4 (python -m mpinn.bench.w4, --scale, --data-seed),
written as text in segments between the arms' row counts (the generator is row-addressed: --start), each arm's
prefix packed once (python -m mpinn.prepare, several files read as one) and the text deleted after packing (but the
test rows', read as text). --out is written after every run; a run already in it (same arm flags, steps, seed and
data) is reused, so an interrupted sweep continues."""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

RULE = 0.001        # the issue's: within this much test AUC of the reference at the same global batch


def say(msg):
    print("lever_auc: " + msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------ arms and the rule
def parse_arm(text, default_batch):
    """NAME=FLAGS -> {"name", "batch", "flags" (the mpinn.train options, --batch taken out)}."""
    name, sep, flags = text.partition("=")
    if not sep or not name or any(c in name for c in " ,="):
        raise ValueError("an arm is NAME=\"FLAGS\" with a NAME of no spaces, commas or '=': %r" % text)
    words, batch, out = shlex.split(flags), default_batch, []
    i = 0
    while i < len(words):
        if words[i] == "--batch-size" or words[i].startswith("--batch-size="):
            raise ValueError("arm %s: give its global batch as --batch N (it sets the rows it reads), not "
                             "--batch-size" % name)
        if words[i] == "--batch" and i + 1 < len(words):
            batch, i = int(words[i + 1]), i + 2
            continue
        if words[i].startswith("--batch="):
            batch, i = int(words[i].split("=", 1)[1]), i + 1
            continue
        out.append(words[i])
        i += 1
    if batch <= 0:
        raise ValueError("arm %s: --batch must be positive, not %d" % (name, batch))
    return {"name": name, "batch": batch, "flags": out}


def check_arms(arms, references):
    """The arms' names are distinct, the references among them and at most one a global batch; returns
    {batch: reference name}."""
    names = [a["name"] for a in arms]
    if len(set(names)) != len(names):
        raise ValueError("two arms share a name: %s" % ",".join(names))
    by_batch = {}
    for r in references:
        if r not in names:
            raise ValueError("the reference %s is not an arm (arms: %s)" % (r, ",".join(names)))
        b = next(a["batch"] for a in arms if a["name"] == r)
        if b in by_batch:
            raise ValueError("two references at global batch %d: %s and %s" % (b, by_batch[b], r))
        by_batch[b] = r
    return by_batch


def verdict(delta):
    """The rule on a mean AUC minus its reference's: within RULE (or better), else worse."""
    if delta < -RULE:
        return "worse by more than %g" % RULE
    return "better by more than %g" % RULE if delta > RULE else "within %g" % RULE


def summary(runs, arms, references):
    """Per arm: AUC mean, spread (max - min over the seeds), logloss mean, the delta against the first reference,
    and the rule against its batch's reference (None where its batch has none)."""
    by_batch = check_arms(arms, references)
    by = {a["name"]: [r for r in runs if r["arm"] == a["name"]] for a in arms}
    mean = {n: statistics.mean(r["auc"] for r in rs) for n, rs in by.items() if rs}
    out = {}
    for a in arms:
        rs = by[a["name"]]
        if not rs:
            continue
        aucs = [r["auc"] for r in rs]
        ref = by_batch.get(a["batch"])
        judged = ref is not None and ref in mean
        out[a["name"]] = {
            "batch": a["batch"], "flags": " ".join(a["flags"]), "seeds": sorted(r["seed"] for r in rs),
            "auc_mean": mean[a["name"]], "auc_spread": max(aucs) - min(aucs),
            "logloss_mean": statistics.mean(r["logloss"] for r in rs),
            "reference": references[0],
            "auc_minus_reference": mean[a["name"]] - mean[references[0]] if references[0] in mean else None,
            "rule_reference": ref,
            "auc_minus_rule_reference": mean[a["name"]] - mean[ref] if judged else None,
            "rule": verdict(mean[a["name"]] - mean[ref]) if judged else "no reference at this batch",
            "may_be_default": (mean[a["name"]] - mean[ref] >= -RULE) if judged else None}
    return out


def table(summ):
    """The summary as a Markdown table."""
    first = next(iter(summ.values()))["reference"] if summ else ""
    lines = ["| arm | global batch | test AUC (mean) | seeds | spread | logloss | AUC - %s | AUC - its batch's "
             "reference | rule (0.001) |" % first, "|---|---|---|---|---|---|---|---|---|"]
    for name, s in summ.items():
        d = s["auc_minus_reference"]
        r = s["auc_minus_rule_reference"]
        lines.append("| %s | %d | %.5f | %d | %.5f | %.5f | %s | %s | %s |" % (
            name, s["batch"], s["auc_mean"], len(s["seeds"]), s["auc_spread"], s["logloss_mean"],
            "" if d is None or name == s["reference"] else "%+.5f" % d,
            "" if r is None or name == s["rule_reference"] else "%+.5f (%s)" % (r, s["rule_reference"]),
            "reference" if name == s["rule_reference"] else s["rule"]))
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------- the data
def segment(workdir, scale, seed, start, stop, truth=False):
    """W4's rows [start, stop) as text, written once."""
    path = os.path.join(workdir, "w4-s%d-seed%d-rows-%d-%d.tsv" % (scale, seed, start, stop))
    if not os.path.exists(path + ".done"):
        say("writing W4 rows %d..%d to %s" % (start, stop, path))
        t = time.perf_counter()
        extra = ["--truth", path[:-4] + "-truth.npy"] if truth else []
        subprocess.run([sys.executable, "-m", "mpinn.bench.w4", "--rows", str(stop - start), "--start", str(start),
                        "--out", path, "--scale", str(scale), "--seed", str(seed), "--quiet"] + extra, check=True)
        open(path + ".done", "w").close()
        say("  %.1f s, %.0f MB" % (time.perf_counter() - t, os.path.getsize(path) / 1e6))
    return path


def make_data(workdir, scale, seed, counts, test_rows, keep_text=False, test_start=None):
    """{rows: packed file of the log's first rows} for each count, and the test rows' text (test_rows from
    test_start, by default right after the largest count)."""
    counts = sorted(set(counts))
    start = counts[-1] if test_start is None else test_start
    test = segment(workdir, scale, seed, start, start + test_rows, truth=True)
    packed = {n: os.path.join(workdir, "w4-s%d-seed%d-train-%d.mpinn" % (scale, seed, n)) for n in counts}
    bounds = [0] + counts
    if all(os.path.exists(p + ".done") for p in packed.values()):
        return packed, test
    texts = [segment(workdir, scale, seed, a, b) for a, b in zip(bounds, bounds[1:])]
    for i, n in enumerate(counts):
        if not os.path.exists(packed[n] + ".done"):
            say("packing the first %d rows into %s" % (n, packed[n]))
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "mpinn.prepare", "--data"] + texts[:i + 1] +
                           ["--out", packed[n], "--quiet"], check=True)
            open(packed[n] + ".done", "w").close()
            say("  %.1f s, %.0f MB" % (time.perf_counter() - t, os.path.getsize(packed[n]) / 1e6))
    if not keep_text:
        for path in texts:
            say("deleting %s (packed)" % path)
            os.remove(path)
            os.remove(path + ".done")
    return packed, test


# --------------------------------------------------------------------------------------------------- the runs
def key(arm, args, seed):
    return {"arm": arm["name"], "batch": arm["batch"], "flags": " ".join(arm["flags"]), "steps": args.steps,
            "seed": seed, "test_rows": args.test_rows, "test_start": args.test_start, "scale": args.scale,
            "data_seed": args.data_seed}


def prior_runs(old, arms, args):
    """The runs of an earlier --out that this sweep's arms would make (any seed): kept, and reused."""
    def same(r, a):
        return all(r.get(k) == v for k, v in key(a, args, None).items() if k != "seed")
    return [r for r in old if any(same(r, a) for a in arms)]


def run_arm(args, arm, train, test, seed):
    """One run: its key, test metrics, the learning rate it reached, seconds."""
    with tempfile.TemporaryDirectory() as d:
        metrics = os.path.join(d, "m.json")
        cmd = [sys.executable, "-m", "mpinn.train", "--data", train, "--valid", test, "--table", "sharded",
               "--batch-size", str(arm["batch"]), "--epochs", "1", "--early-stop", "0", "--seed", str(seed),
               "--no-progress", "--metrics-out", metrics, "--model-out", os.path.join(d, "m.npz")] + arm["flags"]
        say("%s seed %d: %s" % (arm["name"], seed, " ".join(cmd[2:])))
        t = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        if r.returncode != 0:
            raise SystemExit("lever_auc: arm %s (seed %d) exited %d: %s" % (arm["name"], seed, r.returncode,
                                                                             (r.stderr or r.stdout)[-800:]))
        rec = json.load(open(metrics))
    last = rec["history"][-1]
    if last["step"] != args.steps:
        raise SystemExit("lever_auc: arm %s ran %d steps, not %d" % (arm["name"], last["step"], args.steps))
    said = [x.strip() for x in (r.stdout + r.stderr).splitlines() if x.startswith("model: ")]   # its rate
    return dict(key(arm, args, seed), auc=last["valid"]["auc"], logloss=last["valid"]["logloss"],
                steps=last["step"], model_line=said[0] if said else None,
                seconds=round(time.perf_counter() - t, 1))


def write(args, arms, runs):
    rec = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "steps": args.steps, "test_rows": args.test_rows,
           "scale": args.scale, "data_seed": args.data_seed, "references": args.references,
           "arms": {a["name"]: {"batch": a["batch"], "flags": " ".join(a["flags"]), "rows": args.steps * a["batch"]}
                    for a in arms},
           "test": "W4 rows %d..%d" % (args.test_start, args.test_start + args.test_rows),
           "runs": runs, "summary": summary(runs, arms, args.references),
           "measured": "np 1, --table sharded, one pass (1 epoch) of steps x batch rows, test AUC at the end"}
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rec, f, indent=1)
    os.replace(tmp, args.out)
    return rec


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arm", action="append", metavar="NAME=FLAGS", required=True,
                   help="an arm: NAME=\"mpinn.train options and --batch N\" (repeatable)")
    p.add_argument("--reference", default=None, help="comma-separated reference arms, at most one a global batch; "
                   "the first gives the AUC delta (default: the first arm)")
    p.add_argument("--batch", type=int, default=32768, help="an arm's global batch when it names none (32768)")
    p.add_argument("--steps", type=int, default=1000, help="steps an arm, one pass (default 1000)")
    p.add_argument("--test-rows", type=int, default=200000, help="test rows after the longest arm's (200,000)")
    p.add_argument("--test-start", type=int, default=None, help="the first test row (default: right after the longest "
                   "arm's rows; give it to compare arms with another sweep's, e.g. 32768000 beside the 32k arms)")
    p.add_argument("--seeds", default="0,1,2", help="mpinn's --seed of each run (default 0,1,2)")
    p.add_argument("--scale", type=int, default=100, help="W4's --scale (default 100)")
    p.add_argument("--data-seed", type=int, default=0, help="W4's --seed (default 0)")
    p.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "mpinn-lever-auc"))
    p.add_argument("--keep-text", action="store_true", help="keep the training text after packing")
    p.add_argument("--timeout", type=int, default=3600, help="seconds one run may take")
    p.add_argument("--out", default="scripts/results/lever-auc.json")
    args = p.parse_args(argv)
    try:
        arms = [parse_arm(a, args.batch) for a in args.arm]
        args.references = args.reference.split(",") if args.reference else [arms[0]["name"]]
        check_arms(arms, args.references)
    except ValueError as e:
        p.error(str(e))
    seeds = [int(s) for s in args.seeds.split(",")]
    counts = {a["name"]: args.steps * a["batch"] for a in arms}
    args.test_start = max(counts.values()) if args.test_start is None else args.test_start
    if args.test_start < max(counts.values()):
        p.error("--test-start %d is inside the longest arm's %d training rows" % (args.test_start, max(counts.values())))
    os.makedirs(args.workdir, exist_ok=True)
    packed, test = make_data(args.workdir, args.scale, args.data_seed, counts.values(), args.test_rows,
                             args.keep_text, args.test_start)
    prior = prior_runs(json.load(open(args.out))["runs"] if os.path.exists(args.out) else [], arms, args)
    runs = []
    for seed in seeds:
        for a in arms:
            done = [r for r in prior if r["seed"] == seed and prior_runs([r], [a], args)]
            runs.append(done[0] if done else run_arm(args, a, packed[counts[a["name"]]], test, seed))
            if not done:
                say("  AUC %.5f logloss %.5f, %.0f s" % (runs[-1]["auc"], runs[-1]["logloss"], runs[-1]["seconds"]))
            write(args, arms, runs + [r for r in prior if r not in runs])
    rec = write(args, arms, runs + [r for r in prior if r not in runs])
    print(table(rec["summary"]))
    say("written %s" % args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
