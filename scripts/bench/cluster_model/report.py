"""The cluster model's report: its tables (Markdown, printed), its plot and its JSON record under scripts/results/."""
import json
import os
import time

from scripts import RESULTS, ROOT
from scripts.bench.cluster_model import w2_loads
from scripts.bench.cluster_model.costs import PER_RANK, RANKS, dominant


def print_tables(curves, inputs, terms, clusters, nets, rpns):
    """Every table: the legacy model (one rank per node), the legacy sharded terms, then print_cluster's."""
    show = [8, 64, 512, 1024]
    print("\nLegacy (one rank per node; network = this machine's shared memory, or the assumed 10 GbE):")
    print("| workload | exchange | network | " + " | ".join("P=%d" % P for P in show) + " |")
    print("|---|---|---|" + "---|" * len(show))
    for (wl, ex, net), eff in curves.items():
        print("| %s | %s | %s | %s |" % (wl, ex, net, " | ".join("%.0f%%" % (100 * eff[RANKS.index(P)]) for P in show)))
    print("| Horovod (Inception V3 / ResNet-101, 25 GbE, GPUs) | fp32 ring allreduce | published | - | - | ~90% | - |")
    print("\nW2 sharded (legacy), per step (ms) against compute %.2f ms per rank:" % inputs["w2_compute_ms_per_rank_step"])
    names = list(next(iter(next(iter(terms.values())).values())))
    print("| exchange, network | P | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for net, by_p in terms.items():
        for P, t in by_p.items():
            print("| %s | %d | %s |" % (net, P, " | ".join("%.3f" % (1e3 * t[n]) for n in names)))
    print_cluster(clusters, inputs, nets, rpns)


def label(scheme, wire):
    """A W2 scheme on a wire, as the tables and the plot name it."""
    return scheme if wire == "fp32" else "%s, %s rows" % (scheme, wire)


def print_cluster(clusters, inputs, nets, rpns):
    comp = inputs["w2_compute_ms_per_rank_step"]
    print("\nW2 sharded data, per step (%s): unique ids per rank, each node's union (/ the sum of its ranks'), "
          "hot rows (auto) and their share of a rank's ids; inter-node MB per node per step (fp32 / bf16 rows on "
          "the wire) and the busiest owner's rows (gathered / gradient) per scheme:" % "P/R")
    print("| P/R | ids/rank | node union | hot rows | hot share | " + " | ".join(w2_loads.SCHEMES) + " |")
    print("|---|---|---|---|---|" + "---|" * len(w2_loads.SCHEMES))
    for key, c in inputs["w2_counts"].items():
        if key.split("/")[0] in ("64", "1024"):
            print("| %s | %.0f | %.0f (%.2f) | %d | %.1f%% | %s |" % (
                key, c["unique_ids_per_rank"], c["node_union_mean"], c["node_union_over_ranks"], c["hot_rows"],
                100 * c["hot_share_of_rank_ids"], " | ".join(
                    "%.2f / %.2f MB, %d/%d" % (c[s]["inter_node_bytes_per_node"] / 1e6,
                                               c[s]["inter_node_bytes_per_node_bf16"] / 1e6,
                                               c[s]["busiest_owner_takes"], c[s]["busiest_owner_gradient_rows"])
                    for s in w2_loads.SCHEMES)))
    for net in nets:
        for R in rpns:
            rows = [(k, v) for k, v in clusters.items() if k[3] == net["label"] and k[4] == R]
            ps = rows[0][1]["ranks"]
            print("\n%s, %d rank(s) per node: predicted efficiency (floor: compute / max(compute, link bytes / B))"
                  % (net["label"], R))
            print("| workload | scheme | " + " | ".join("P=%d" % P for P in ps) + " |")
            print("|---|---|" + "---|" * len(ps))
            for (wl, scheme, wire, _, _), v in rows:
                print("| %s | %s | %s |" % (wl, label(scheme, wire), " | ".join(
                    "%.0f%% (%.0f%%)" % (100 * e, 100 * f) for e, f in zip(v["eff"], v["floor"]))))
    R = max(rpns)
    print("\nW2 sharded at R = %d ranks per node, compute %.2f ms per rank per step: each scheme with fp32 and bf16 "
          "rows on the wire, its floor, its dominant term (ms), and bf16's casts (ms, the busiest owner's)" % (R, comp))
    print("| network | P | scheme | fp32 | floor | bf16 | floor | inter msgs/rank | inter MB/node fp32 / bf16 | "
          "dominant, fp32 | dominant, bf16 | bf16 casts |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for net in nets:
        for P in (64, 1024):
            c = inputs["w2_counts"]["%d/%d" % (P, R)]
            for s in w2_loads.SCHEMES:
                cells = []
                for wire in ("fp32", "bf16"):
                    v = clusters[("W2", s, wire, net["label"], R)]
                    i, t = v["ranks"].index(P), v["terms"][P]
                    top = dominant(t)
                    cells.append((100 * v["eff"][i], 100 * v["floor"][i], "%s %.2f" % (top, 1e3 * t[top]),
                                  1e3 * t.get("casts (%s)" % wire, 0.0)))
                (e32, f32, d32, _), (e16, f16, d16, casts) = cells
                print("| %s | %d | %s | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %d | %.2f / %.2f | %s | %s | %.2f |" % (
                    net["label"], P, s, e32, f32, e16, f16, c[s]["inter_node_messages_per_rank"],
                    c[s]["inter_node_bytes_per_node"] / 1e6, c[s]["inter_node_bytes_per_node_bf16"] / 1e6,
                    d32, d16, casts))
    print("\nW2 sharded, before (flat, fp32 rows) and after (the best scheme and wire), R = %d:" % R)
    print("| network | P | before | floor | dominant | after (scheme) | floor | dominant |")
    print("|---|---|---|---|---|---|---|---|")
    for net in nets:
        for P in (64, 1024):
            got = {(s, w): v for (wl, s, w, n, r), v in clusters.items() if wl == "W2" and n == net["label"] and r == R}
            i = got[("flat", "fp32")]["ranks"].index(P)
            best = max(got, key=lambda k: got[k]["eff"][i])
            cell = ["%.1f%% | %.1f%% | %s" % (100 * got[k]["eff"][i], 100 * got[k]["floor"][i],
                                              dominant(got[k]["terms"][P])) for k in (("flat", "fp32"), best)]
            print("| %s | %d | %s | %s |" % (net["label"], P, cell[0],
                                             cell[1].replace(" |", " (%s) |" % label(*best), 1)))


def save(curves, inputs, terms, clusters, sources, tag=""):
    """The plot (cluster-model-DATE[-TAG].png) and every number (its .json); returns the PNG's path."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 3, figsize=(18, 9), sharey=True)
    for ax, wl in zip(axes[0], ("W1", "W2")):
        for (w, ex, net), eff in curves.items():
            if w == wl:
                ax.plot(RANKS, [100 * e for e in eff], "-" if net == "measured" else "--", marker=".",
                        label="%s, %s" % (ex, net))
        ax.plot([512], [90], "k*", ms=14, label="Horovod, 512 GPUs (Sergeev & Del Balso 2018)")
        ax.set_title("%s, one rank per node (per-rank batch %d)" % (wl, PER_RANK[wl]))
    panels = (("W1", "fp32", "W1, R ranks per node: shared memory inside, network between"),
              ("W2", "fp32", "W2 sharded, fp32 rows on the wire"), ("W2", "bf16", "W2 sharded, bf16 rows on the wire"))
    for ax, (wl, wire, title) in zip(axes[1], panels):
        for (w, s, wi, net, R), v in clusters.items():
            if w == wl and wi == wire:
                ax.plot(v["ranks"], [100 * e for e in v["eff"]], "--" if "assumed" in net else "-",
                        marker="." if R == 1 else "x", label="%s, R=%d, %s" % (s, R, net))
        ax.set_title(title)
    R = max(k[4] for k in clusters)
    ax = axes[0][2]
    for (w, s, wire, net, r), v in clusters.items():
        if w == "W2" and r == R and s in ("flat", "node"):
            line, = ax.plot(v["ranks"], [100 * e for e in v["eff"]], "-" if wire == "fp32" else "--", marker=".",
                            label="%s, %s" % (label(s, wire), net))
            ax.plot(v["ranks"], [100 * f for f in v["floor"]], ":", color=line.get_color())
    ax.set_title("W2 sharded, R = %d: fp32 (solid) and bf16 (dashed) rows, floors dotted" % R)
    for ax in axes.ravel():
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ranks")
        ax.legend(fontsize=6, loc="lower left")
        ax.grid(alpha=0.3)
        ax.set_ylabel("scaling efficiency, %")
    axes[0][2].legend(fontsize=6, loc="upper right")
    fig.suptitle("Cluster model: predicted efficiency, weak scaling (solid: measured, dashed: assumed 10 GbE; "
                 "top right: fp32 solid, bf16 dashed)")
    fig.tight_layout()
    stamp = time.strftime("%Y-%m-%d")
    stamp += "-" + tag if tag else ""
    png = os.path.join(RESULTS, "cluster-model-%s.png" % stamp)
    fig.savefig(png, dpi=110)
    with open(os.path.join(RESULTS, "cluster-model-%s.json" % stamp), "w") as f:
        json.dump({"ranks": RANKS, "inputs": inputs,
                   "source": [os.path.relpath(p, ROOT) if p.startswith(ROOT) else p for p in sources],
                   "curves": [{"workload": w, "exchange": e, "network": n, "efficiency": v}
                              for (w, e, n), v in curves.items()],
                   "w2_sharded_terms_s": {net: {str(P): t for P, t in by_p.items()} for net, by_p in terms.items()},
                   "cluster": [{"workload": w, "scheme": s, "wire": wire, "network": n, "ranks_per_node": R,
                                "ranks": v["ranks"], "efficiency": v["eff"], "floor": v["floor"],
                                "terms_s": {str(P): t for P, t in v["terms"].items()}}
                               for (w, s, wire, n, R), v in clusters.items()]},
                  f, indent=1)
    return png
