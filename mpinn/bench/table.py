"""The side-by-side table of training records (mpinn's and the peers'), from their JSONL files."""
import json
import sys

TRAINING_PEERS = ("ddp_gloo", "mpi4py_naive", "mpinn")


def short_variant(r):
    if r["peer"] == "ddp_gloo":
        return {"embbag_sparse": "EmbBag sparse", "embbag_dense": "EmbBag dense",
                "csr": "sparse CSR mm"}.get(r.get("w2_mode"), "MLP")
    if r["peer"] == "mpi4py_naive":
        return "DT42-style"
    return r.get("reduce") or r.get("variant", "")[:14]


def print_table(paths, out=sys.stdout):
    recs = []
    for p in paths:
        with open(p) as f:
            recs += [json.loads(line) for line in f if line.strip()]
    rows = sorted((r for r in recs if r.get("peer") in TRAINING_PEERS and r.get("samples_per_s") is not None),
                  key=lambda r: (r["workload"], r["np"], r.get("steps_total", 0) < 100,
                                 TRAINING_PEERS.index(r["peer"]), short_variant(r)))
    fmt = "%-12s %-3s %-14s %2s %9s %8s %8s %8s %7s %-9s %-9s %5s %s"
    print(fmt % ("peer", "wl", "variant", "np", "samples/s", "step_ms", "comp_ms", "comm_ms", "RSS_MB",
                 "loss_init", "loss_final", "steps", "foreign_cores"), file=out)
    prev = None
    for r in rows:
        if prev is not None and (r["workload"], r["np"]) != prev:
            print(file=out)
        prev = (r["workload"], r["np"])
        ld = r.get("load") or {}
        print(fmt % (r["peer"], r["workload"], short_variant(r), r["np"], "%.0f" % r["samples_per_s"],
                     "%.2f" % r["step_ms"], "%.2f" % r["compute_ms"], "%.2f" % r["comm_ms"],
                     "%.0f" % r["peak_rss_mb_max"], "%.6f" % r["loss_initial"], "%.6f" % r["loss_final"],
                     r["steps_total"], "-" if ld.get("foreign_cpu_cores") is None
                     else "%.2f" % ld["foreign_cpu_cores"]), file=out)
    for r in recs:
        if r.get("status") not in (None, "ok"):
            print("FAILED: %s %s rc=%s" % (r.get("run_name") or r.get("peer"), r.get("status"), r.get("rc")),
                  file=out)


