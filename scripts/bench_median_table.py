"""Medians of repeated peer-format records: python scripts/bench_median_table.py FILE.jsonl [...]

Groups the training records (mpinn and its peers) by peer, workload, np and variant, and prints
a Markdown table of median samples/s (with the runs' range and their worst foreign load), the
mpinn / best-peer ratio, and the final losses (which must agree: the same work)."""
import json
import statistics
import sys

PEERS = ("ddp_gloo", "mpi4py_naive", "mpinn")


def load(paths):
    recs = []
    for p in paths:
        with open(p) as f:
            recs += [json.loads(line) for line in f if line.strip()]
    return [r for r in recs if r.get("peer") in PEERS and r.get("samples_per_s") and r.get("steps_total", 0) >= 100]


def main(paths):
    groups = {}
    for r in load(paths):
        groups.setdefault((r["workload"], r["np"], r["peer"]), []).append(r)
    print("| workload | np | PyTorch DDP (gloo) | DT42-style mpi4py | **mpinn** | mpinn / best peer | "
          "mpinn step ms (compute + comm) | loss_final (all) | runs, worst foreign cores |")
    print("|---|---|---|---|---|---|---|---|---|")
    for wl, np_ in sorted({(w, n) for w, n, _ in groups}):
        med, cells, losses, worst, runs = {}, [], set(), 0.0, 0
        for peer in PEERS:
            rs = groups.get((wl, np_, peer), [])
            if not rs:
                cells.append("-")
                continue
            v = [r["samples_per_s"] for r in rs]
            med[peer] = statistics.median(v)
            cells.append("%s%s%s (%s-%s)" % ("**" if peer == "mpinn" else "", format(round(med[peer]), ","),
                                             "**" if peer == "mpinn" else "", format(round(min(v)), ","),
                                             format(round(max(v)), ",")))
            losses |= {"%.6g" % r["loss_final"] for r in rs}
            worst = max([worst] + [(r.get("load") or {}).get("foreign_cpu_cores") or 0 for r in rs])
            runs = max(runs, len(rs))
        best = max((v for p, v in med.items() if p != "mpinn"), default=None)
        ratio = "%.2fx" % (med["mpinn"] / best) if best and "mpinn" in med else "-"
        mr = groups.get((wl, np_, "mpinn"), [])
        split = "-"
        if mr:
            split = "%.2f (%.2f + %.2f)" % tuple(statistics.median(r[k] for r in mr)
                                                 for k in ("step_ms", "compute_ms", "comm_ms"))
        print("| %s | %d | %s | %s | %s | %s | %s | %s | %d, %.2f |" % (
            wl, np_, cells[0], cells[1], cells[2], ratio, split, " ".join(sorted(losses)), runs, worst))


if __name__ == "__main__":
    main(sys.argv[1:])
