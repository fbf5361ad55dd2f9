"""The one bandwidth convention of the benchmarks and the cluster model (issue 63): a bandwidth B is bytes that
CROSS, one direction, per second: bytes a rank sends to the other ranks (and receives from them), never bytes
it hands to itself. Every fit of t = alpha + x / B converts its sizes to crossing bytes first (crossing_bytes,
fit_crossing), and every cost divides crossing bytes by it.

Per call of n bytes at P ranks, what one rank sends to the others:
  alltoallv   n bytes a rank in total, split evenly over the P ranks, itself included: n (P - 1) / P
              (at P = 2 only n / 2 crosses: a fit of t against n measured twice the crossing rate);
  allreduce   n bytes: 2 (P - 1) / P n (ring, or reduce-scatter + allgather); at P = 2 every algorithm
              MPICH picks (recursive doubling too) sends n, so there the fit against n is already crossing;
  allgatherv  n bytes a rank: (P - 1) n, at P = 2 n again.
Between hosts, a link carries what its ranks send off the host: for an Alltoallv with R ranks a host,
R n (P - R) / P a direction (link_bytes); at 1 rank a host that is crossing_bytes.

Moved from scripts/bench/crossing.py so that mpinn.bench.netprobe (the probe a cluster runs) can fit.
Until 2026-12-02 the Alltoallv fits (scripts/bench/multihost.py --probe, scripts/bench/alltoallv.py) were made
against n, so their B was twice the crossing rate at P = 2, while the model divided crossing bytes by it.
"""

FACTOR = {"alltoallv": lambda P: (P - 1) / P, "allreduce": lambda P: 2 * (P - 1) / P, "allgatherv": lambda P: P - 1}


def crossing_bytes(collective, n, P):
    """Bytes one rank sends to the other ranks in one call of `collective` of n bytes at P ranks."""
    return FACTOR[collective](P) * n


def link_bytes(n, P, R):
    """Bytes an Alltoallv of n bytes a rank (split over all P ranks) puts on one host's link, one direction,
    with R ranks a host: each of its R ranks sends n / P to each of the P - R ranks on other hosts."""
    return R * n * (P - R) / P


def fit_line(points):
    """Least-squares t = alpha + x / B over [(x, t)]: (alpha s, B per s); alpha is the smallest x's time
    (the slope alone sets B), as scripts/bench/scaling.py's fit_alpha_beta."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    alpha = max(min(y for x, y in points if x == min(p[0] for p in points)), 0.0)
    return alpha, 1.0 / slope


def fit_crossing(table, collective, P, R=None):
    """(alpha s, B crossing bytes/s) of a sweep {str(n): seconds} (non-numeric keys skipped) of `collective`
    at P ranks; with R (ranks a host, alltoallv only), B is the bytes on a host's link per second."""
    if R is not None and collective != "alltoallv":
        raise ValueError("link_bytes counts an Alltoallv only")
    conv = (lambda n: link_bytes(n, P, R)) if R is not None else (lambda n: crossing_bytes(collective, n, P))
    return fit_line([(conv(int(k)), v) for k, v in table.items() if k.isdigit()])


def slope(table):
    """Least-squares seconds per unit of the keys (message counts) of {count: seconds}."""
    pts = [(int(k), v) for k, v in table.items()]
    mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


CONVENTION = ("crossing_Bps: bytes a rank sends to other ranks per second, one direction (Alltoallv: n (P-1)/P of "
              "its n; Allreduce: 2 (P-1)/P n), mpinn/bench/crossing.py; link_Bps (Alltoallv): bytes on a host's "
              "link per second, one direction, R n (P-R)/P; per_message_s: the slope of m messages in flight. "
              "Files before 2026-12-02 have bandwidth_Bps, fitted against n: at 2x1 twice the Alltoallv's "
              "crossing rate")


def probe_fits(pts, R):
    """The multihost probe's fits of one layout's points (mpinn.bench.netprobe, and scripts/bench/multihost.py --probe in the lab) at R ranks a host:
    per collective alpha_s and crossing_Bps, the Alltoallv's link_Bps and (if measured) per_message_s, and
    alltoall_counts_s. The cluster model re-fits stored points with this, whatever the file's own fits say."""
    P = pts["np"]
    f = {}
    for coll in ("alltoallv", "allreduce"):
        a, b = fit_crossing(pts[coll], coll, P)
        f[coll] = {"alpha_s": a, "crossing_Bps": b}
    f["alltoallv"]["link_Bps"] = fit_crossing(pts["alltoallv"], "alltoallv", P, R)[1]
    if "in_flight" in pts:
        f["alltoallv"]["per_message_s"] = slope(pts["in_flight"])
    f["alltoall_counts_s"] = pts["alltoall_counts"]
    return f
