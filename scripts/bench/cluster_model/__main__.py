"""The cluster model's command line: python -m scripts.bench.cluster_model --help (the package docstring says
what it models and how)."""
import argparse
import json
import os
import sys

from scripts import ROOT
from scripts.bench import cluster_model as package
from scripts.bench.cluster_model import levers, report
from scripts.bench.cluster_model.costs import ASSUMED
from scripts.bench.cluster_model.model import latest, model, read_network


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m scripts.bench.cluster_model",
                                description=package.__doc__.split("\n")[0])
    p.add_argument("scaling", nargs="?", help="scripts.bench.scaling's JSON (default: the newest in scripts/results)")
    p.add_argument("alltoallv", nargs="?", help="scripts.bench.alltoallv's JSON (default: the newest)")
    p.add_argument("--network", help="a network probe's JSON: python -m mpinn.bench.netprobe's from your cluster, or the lab's (default: the newest "
                   "scripts/results/multihost-probe-*.json; without one, only the assumed 10 GbE)")
    p.add_argument("--ranks-per-node", default="1,8", help="R values, comma-separated (default 1,8)")
    p.add_argument("--tag", default="", help="a word added to the output's name: cluster-model-DATE-TAG.json/.png")
    p.add_argument("--levers", action="store_true",
                   help="instead: issue 63's levers (node-sum, one-step-stale, bf16 rows) at 64 and 1024 ranks, 512 "
                        "and 2048 rows a rank, 8 a node, and its targets; writes cluster-model-DATE-levers.json "
                        "(scripts/bench/cluster_model/levers.py says what is modelled)")
    args = p.parse_args(argv)
    scaling = args.scaling or latest("bench-scaling-2*.json")
    a2a_path = args.alltoallv or latest("bench-alltoallv-*.json")
    net_path = args.network or latest("multihost-probe-*.json", required=False)
    rpns = sorted({int(x) for x in args.ranks_per_node.split(",")})
    if any(R < 1 or 1024 % R for R in rpns):
        p.error("--ranks-per-node: each R must divide 1024")
    for path in (scaling, a2a_path) + ((net_path,) if net_path else ()):
        if not os.path.exists(path):
            p.error("no such measurement file: %s (run scripts.bench.scaling and scripts.bench.alltoallv)" % path)
    with open(scaling) as f:
        doc = json.load(f)
    with open(a2a_path) as f:
        a2a = json.load(f)
    nets = ([read_network(net_path)] if net_path else []) + [ASSUMED]
    if args.levers:
        print(levers.__doc__.strip())
        rows, inputs = levers.levers(doc, a2a, nets)
        targets = levers.check_targets(rows, inputs, ASSUMED["label"])
        print("\ntimed now (ns a row, or an element for casts and the relay's sum, book_*: ns fixed and an id; load "
              "average before and after): %s, %s" % (
                  {k: [round(x, 1) for x in v] if isinstance(v, list) else round(v, 2)
                   for k, v in inputs["t_per_row_or_element_ns"].items() if k != "dense"},
                          [round(x, 1) for x in inputs["load_average_1min_before_after_timing"]]))
        print("compute a rank a step, ms (linear in the rows from np 1; affine through np 1 and 2): %s; %s" % (
            {k: round(v, 3) for k, v in inputs["compute_ms"].items()},
            {k: round(v, 3) for k, v in inputs["compute_ms_affine"].items()}))
        levers.print_levers(rows, targets)
        path = levers.save(rows, inputs, targets, (scaling, a2a_path) + ((net_path,) if net_path else ()),
                           args.tag or "levers")
        print("\nwrote %s" % os.path.relpath(path, ROOT))
        return
    curves, inputs, terms, clusters = model(doc, a2a, nets, rpns)
    print(package.__doc__.split("\n\nThe package:")[0].strip())
    print("inputs (from %s, %s%s and timed now): %s" % (
        os.path.relpath(scaling, ROOT), os.path.relpath(a2a_path, ROOT), ", " + net_path if net_path else "",
        json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in inputs.items()
                    if k != "w2_counts"})))
    if not net_path:
        print("NOTE: no scripts/results/multihost-probe-*.json and no --network: only the assumed 10 GbE is modelled")
    print("assumptions: weak scaling at fixed per-rank batch, ring collectives, no overlap, no stragglers; "
          "see scripts/bench/cluster_model/__init__.py")
    report.print_tables(curves, inputs, terms, clusters, nets, rpns)
    png = report.save(curves, inputs, terms, clusters, (scaling, a2a_path) + ((net_path,) if net_path else ()),
                      args.tag)
    print("\nwrote %s and its .json" % os.path.relpath(png, ROOT))


if __name__ == "__main__":
    sys.exit(main())
