"""Medians of repeated peer-format records: python -m scripts.bench.median_table FILE.jsonl [...]

Groups the training records (mpinn and its peers) by peer, workload, np and mpinn's input mode, and
prints a Markdown table of median samples/s (with the runs' range and their worst foreign load), the
ratios of mpinn's faster mode to each peer, and the final losses (which must agree: the same work)."""
import json
import statistics
import sys

PEERS = ("ddp_gloo", "mpi4py_naive", "mpinn")
COLUMNS = ("ddp_gloo", "mpi4py_naive", "mpinn", "mpinn local")


def column(r):
    """mpinn's records split by input mode: rank 0 scatters (default) or every rank reads its own."""
    return "mpinn local" if r["peer"] == "mpinn" and r.get("input") == "local" else r["peer"]


def load(paths):
    recs = []
    for p in paths:
        with open(p) as f:
            recs += [json.loads(line) for line in f if line.strip()]
    return [r for r in recs if r.get("peer") in PEERS and r.get("samples_per_s") and r.get("steps_total", 0) >= 100]


def main(paths):
    groups = {}
    for r in load(paths):
        groups.setdefault((r["workload"], r["np"], column(r)), []).append(r)
    print("| workload | np | PyTorch DDP (gloo) | DT42-style mpi4py | **mpinn** (rank 0 scatters) | "
          "**mpinn --input local** | best mpinn / DDP | best mpinn / DT42 | best mpinn step ms "
          "(compute + comm) | loss_final (all) | runs, worst foreign cores |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for wl, np_ in sorted({(w, n) for w, n, _ in groups}):
        med, cells, losses, worst, runs = {}, [], set(), 0.0, 0
        for col in COLUMNS:
            rs = groups.get((wl, np_, col), [])
            if not rs:
                cells.append("-")
                continue
            v = [r["samples_per_s"] for r in rs]
            med[col] = statistics.median(v)
            bold = "**" if col.startswith("mpinn") else ""
            cells.append("%s%s%s (%s-%s)" % (bold, format(round(med[col]), ","), bold,
                                             format(round(min(v)), ","), format(round(max(v)), ",")))
            losses |= {"%.6g" % r["loss_final"] for r in rs}
            worst = max([worst] + [(r.get("load") or {}).get("foreign_cpu_cores") or 0 for r in rs])
            runs = max(runs, len(rs))
        mine = [c for c in ("mpinn", "mpinn local") if c in med]
        best = max(mine, key=lambda c: med[c]) if mine else None
        ratios = ["%.2fx" % (med[best] / med[p]) if best and p in med else "-" for p in PEERS[:2]]
        split = "-"
        if best:
            split = "%.2f (%.2f + %.2f)" % tuple(statistics.median(r[k] for r in groups[(wl, np_, best)])
                                                 for k in ("step_ms", "compute_ms", "comm_ms"))
        print("| %s | %d | %s | %s | %s | %s | %s | %d, %.2f |" % (
            wl, np_, " | ".join(cells), ratios[0], ratios[1], split, " ".join(sorted(losses)), runs, worst))


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", metavar="FILE.jsonl", help="peer-format records")
    args = ap.parse_args()
    missing = [f for f in args.files if not __import__("os").path.exists(f)]
    if missing:
        ap.error("no such file: %s" % missing[0])
    main(args.files)
