"""Pre-flight under the training launcher: checks the hostfile, every rank's software and GPU, and times the gradient exchange."""
import importlib.util
import json
import os
import platform
import re
import sys
import time

from mpinn.host.launch import pin_threads

pin_threads()       # before numpy loads its BLAS: one policy for train, the API and the doctor

import numpy as np  # noqa: E402

from mpinn import __version__, settings  # noqa: E402
from mpinn.core.batch import Layout  # noqa: E402
from mpinn.core.errors import MpinnError  # noqa: E402
from mpinn.core.spec import ModelSpec  # noqa: E402
from mpinn.data import load_default  # noqa: E402
from mpinn.data.info import DataInfo  # noqa: E402
from mpinn.device.backend import get_backend  # noqa: E402
from mpinn.files.outputs import written_whole  # noqa: E402
from mpinn.host.hostfile import check_hostfile_against_job, parse_hostfile  # noqa: E402
from mpinn.optim import fused  # noqa: E402
from mpinn.settings.job_rules import MODEL_MEMORY, check_job  # noqa: E402
from mpinn.settings.options import Parser, hidden_sizes, nonneg_float, positive_int  # noqa: E402
from mpinn.settings.table import trick_bits  # noqa: E402

# what must be the same on every host (the rest of a rank's record may differ: host, local rank, GPU)
COMPARED = ("python", "numpy", "scipy", "mpi4py", "mpi", "mpinn", "cupy")
DEFAULT_FEATURES, DEFAULT_DENSE = 20, 4   # the embedded click log's shape: 20 hashed columns, 4 numeric


# ---------------------------------------------------------------- one rank's record
def _version(module):
    try:
        return __import__(module).__version__
    except ImportError:
        return "not installed"


def short_library(line):
    """'MPICH Version:      5.0.2' -> 'MPICH 5.0.2'; 'Open MPI v5.0.11, package: ...' -> 'Open MPI v5.0.11'."""
    line = " ".join(line.replace("Version:", "").split())
    return line.split(",")[0]


def gpu_for(local_rank):
    """(cupy version, the GPU this rank would use): device = local rank mod the devices this host shows."""
    if importlib.util.find_spec("cupy") is None:
        return "not installed", "none (cupy not installed)"
    try:
        xp = get_backend("cupy").xp
    except MpinnError as e:
        return "broken", "none (cupy does not import: %s)" % str(e).split(": ", 1)[-1]
    try:
        count = xp.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001 - any CUDA runtime failure means: no usable GPU
        return xp.__version__, "none (no CUDA device: %s)" % (str(e).splitlines() or [type(e).__name__])[0]
    if count == 0:
        return xp.__version__, "none (0 CUDA devices)"
    device = local_rank % count
    name = xp.cuda.runtime.getDeviceProperties(device)["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    return xp.__version__, "cuda:%d %s (%d on host)" % (device, name, count)


def rank_record(comm, topo):
    from mpinn.comm import node  # start-up: --help needs no MPI (mpi4py starts it at import)
    local_rank, local_size = topo.local_of[comm.rank], topo.node_size(comm.rank)
    cupy, gpu = gpu_for(local_rank)
    return {"rank": comm.rank, "host": node.processor_name(), "local_rank": local_rank,
            "local_size": local_size, "pid": os.getpid(),
            "python": platform.python_version(), "numpy": np.__version__, "scipy": _version("scipy"),
            "mpi4py": node.mpi4py_version(), "mpi": short_library(node.mpi_library_version()),
            "mpinn": __version__, "cupy": cupy, "gpu": gpu, "cpus": len(os.sched_getaffinity(0)),
            "blas_threads": os.environ.get("OMP_NUM_THREADS", "default"),
            "executable": sys.executable, "fused": fused.status()}


def differences(records):
    """One line per compared field whose value is not the same on every rank, naming the hosts."""
    out = []
    for key in COMPARED:
        where = {}
        for r in records:
            where.setdefault(r[key], {}).setdefault(r["host"], []).append(r["rank"])
        if len(where) > 1:
            parts = ["%s on %s" % (value, ", ".join("%s (rank%s %s)" % (
                h, "s"[:len(ranks) != 1], ",".join(map(str, ranks))) for h, ranks in hosts.items()))
                for value, hosts in where.items()]
            out.append("%s differs: %s" % (key, "; ".join(parts)))
    return out


def host_notes(records):
    """Per host: more ranks than cores, more ranks than GPUs, GPUs on some hosts only."""
    notes = []
    by_host = {}
    for r in records:
        by_host.setdefault(r["host"], []).append(r)
    for host, rs in by_host.items():
        cpus = max(r.get("cpus", 0) for r in rs)
        if cpus and len(rs) > cpus:
            notes.append("%s: %d ranks on %d cores; MPI ranks busy-poll while they wait, so every step slows "
                         "down: use at most one rank per core (at most -np %d there, or fewer slots in the hostfile)"
                         % (host, len(rs), cpus, cpus))
        m = re.search(r"\((\d+) on host\)", rs[0]["gpu"])
        if m and len(rs) > int(m.group(1)):
            notes.append("%s: %d ranks share %s GPU(s)" % (host, len(rs), m.group(1)))
    has = {h for h, rs in by_host.items() if rs[0]["gpu"].startswith("cuda:")}
    if has and has != set(by_host):
        notes.append("GPUs on %s but none on %s" % (", ".join(sorted(has)),
                                                   ", ".join(sorted(set(by_host) - has))))
    return notes


# ---------------------------------------------------------------- timings
def _median(xs):
    return float(np.median(xs)) if len(xs) else 0.0


def time_allreduce(comm, n, dtype, repeats):
    """Seconds per in-place Allreduce(SUM) of n elements: per repeat the slowest rank, then the median."""
    buf = np.zeros(n, dtype=dtype)
    comm.Allreduce_sum_(buf, "doctor buffer")        # warm-up: connections are made on first use
    mine = []
    for _ in range(repeats):
        comm.barrier()
        t = time.perf_counter()
        comm.Allreduce_sum_(buf, "doctor buffer")
        mine.append(time.perf_counter() - t)
    per_rank = comm.allgather_obj(mine)
    slowest = [max(ts) for ts in zip(*per_rank)]
    return {"elements": int(n), "dtype": np.dtype(dtype).name, "bytes": int(n * np.dtype(dtype).itemsize),
            "repeats": repeats, "median_s": _median(slowest), "min_s": float(min(slowest))}


def bus_bandwidth(result, size):
    """GB/s as nccl-tests count it: an Allreduce moves 2 (P-1)/P of the buffer through each link."""
    if size < 2 or result["median_s"] <= 0:
        return None
    return 2 * (size - 1) / size * result["bytes"] / result["median_s"] / 1e9


def default_spec(args):
    return ModelSpec(2 ** args.hash_bits, DEFAULT_DENSE, args.hidden, 1, args.activation, "sigmoid",
                     args.dtype, sparse_fan_in=float(DEFAULT_FEATURES), wide=bool(args.hidden))   # as training


def time_step(job, args, spec, repeats):
    """Time training steps as training takes them (the same configuration, plan, Run and Trainer: scatter,
    forward/backward, gradient exchange, an SGD update) on the embedded click log's first rows; per
    phase (the step's own timeline), the median over steps of the mean over ranks."""
    from mpinn.training import Run  # start-up: training's modules (and MPI) load only when a run checks a job
    cfg = settings.from_keywords(None, hash_bits=args.hash_bits, hidden=args.hidden, activation=args.activation,
                                 dtype=args.dtype, batch_size=args.batch_size, reduce=args.reduce,
                                 sparse_threshold=args.sparse_threshold, table=args.table, optimizer="sgd", lr=0.1,
                                 epochs=1, early_stop=0, holdout=0, quiet=True)
    settings.check(cfg)
    info = DataInfo({"task": "binary"}, Layout(spec.n_sparse, spec.n_dense, args.dtype, args.dtype), 1,
                    spec.sparse_fan_in, args.batch_size, False)
    run = Run(settings.resolve(cfg, info, job.size), job, info)
    trainer, comm, sharded = run.start(), run.comm, run.plan.table == "sharded"
    batch = None
    if comm.rank == 0:
        batch = load_default(args.batch_size, 0, cfg.hashing).take(np.arange(args.batch_size), args.dtype)
    keys = ["scatter", "compute"] + ([k for k, _ in SHARDED_PARTS] if sharded else ["exchange"]) + ["update"]
    mine = []
    for s in range(repeats + 1):             # the first step is a warm-up
        comm.barrier()
        t = trainer.timeline
        before, parts = dict(t.totals), dict(t.parts)
        t0 = time.perf_counter()
        local = comm.scatter_batch(batch, trainer.layout)
        t.add("data", t0, time.perf_counter(), s + 1)
        trainer.step_slice(local, args.batch_size)
        d = {phase: t.totals[phase] - before[phase] for phase in t.totals}
        took = {"scatter": d["data"], "compute": d["compute"], "update": d["update"]}
        if sharded:     # a sharded step's communication, by part
            took.update({k: t.parts.get(name, 0.0) - parts.get(name, 0.0) for k, name in SHARDED_PARTS})
        else:
            took["exchange"] = d["comm"]
        if s:
            mine.append(took)
    per_rank = comm.allgather_obj((mine, comm.last_exchange))
    phases = {k + "_s": _median([np.mean([ts[i][k] for ts, _ in per_rank]) for i in range(repeats)]) for k in keys}
    total = sum(phases.values())
    comm_keys = ("scatter", "fetch", "return", "allreduce") if sharded else ("scatter", "exchange")
    comm_s = sum(phases[k + "_s"] for k in comm_keys)
    return dict(phases, step_s=total, comm_share=comm_s / total if total else 0.0,
                exchange="sharded" if sharded else per_rank[0][1] or "dense", repeats=repeats,
                batch_size=args.batch_size, rows_per_rank=-(-args.batch_size // comm.size), reduce=comm.name,
                table=run.plan.table, table_why=run.plan.table_why, model=describe_spec(spec))


def describe_spec(spec):
    return "%d hashed + %d dense -> %s (%s, sigmoid head), %s" % (
        spec.n_sparse, spec.n_dense, "-".join(map(str, spec.hidden + (spec.n_out,))), spec.activation, spec.dtype)


SHARDED_PARTS = (("fetch", "fetch rows (Alltoallv)"), ("return", "gradient rows to owners (Alltoallv)"),
                 ("allreduce", "dense Allreduce"))


# ---------------------------------------------------------------- the report
def _ms(s):
    if s < 1e-3:
        return "%.0f us" % (1e6 * s)
    return "%.2f ms" % (1e3 * s) if s < 0.1 else "%.0f ms" % (1e3 * s)


def _mib(b):
    return "%.1f MiB" % (b / 2 ** 20) if b >= 2 ** 20 else "%d B" % b


def format_report(rep):
    records = rep["ranks"]
    hosts = sorted({r["host"] for r in records})
    lines = ["mpinn doctor: %d rank%s on %d host%s, %s" % (
        len(records), "s"[:len(records) != 1], len(hosts), "s"[:len(hosts) != 1], records[0]["mpi"])]
    if rep.get("launcher"):
        lines.append("launcher: " + rep["launcher"])
    if rep.get("hostfile"):
        lines.append("hostfile: " + rep["hostfile"]["description"])
    cols = [("rank", "rank"), ("host", "host"), ("local", None), ("python", "python"), ("numpy", "numpy"),
            ("scipy", "scipy"), ("mpi4py", "mpi4py"), ("MPI", "mpi"), ("mpinn", "mpinn"), ("GPU", "gpu")]
    rows = [[str(r[k]) if k else "%d/%d" % (r["local_rank"], r["local_size"]) for _, k in cols]
            for r in records]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, (h, _) in enumerate(cols)]
    lines.append("  ".join(h.ljust(w) for (h, _), w in zip(cols, widths)).rstrip())
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows]
    if not rep["differences"]:
        lines.append("software: the same on every host (%s)" % ", ".join(COMPARED))
    off = sorted({r["host"] + ": " + r.get("fused", "?") for r in records
                  if not r.get("fused", "").startswith("compiled")})
    lines.append("fused update kernels: " + ("compiled on every host" if not off else "; ".join(off) +
                                             " (the numpy passes run there, with the same bits)"))
    ar, lat = rep["allreduce"], rep["latency"]
    bw = rep["allreduce"].get("bus_gb_s")
    lines.append("allreduce: %d x %s (%s, %s): %s (median of %d, min %s)%s; 1 element: %s" % (
        ar["elements"], ar["dtype"], _mib(ar["bytes"]), ar["what"], _ms(ar["median_s"]), ar["repeats"],
        _ms(ar["min_s"]),
        ", bus bandwidth %.2f GB/s" % bw if bw else "", _ms(lat["median_s"])))
    st = rep.get("step")
    if st:
        lines.append("step estimate: %s, global batch %d (%d rows/rank), --reduce %s, table %s (%s), "
                     "embedded click-log rows:" % (st["model"], st["batch_size"], st["rows_per_rank"], st["reduce"],
                                                   st.get("table", "replicated"), st.get("table_why", "")))
        if st.get("table") == "sharded":
            lines.append("  scatter %s + compute %s + fetch rows %s (Alltoallv) + gradient rows to owners %s "
                         "(Alltoallv) + dense Allreduce %s + update of own rows %s = %s per step: communication %.0f%%"
                         % tuple([_ms(st[k + "_s"]) for k in ("scatter", "compute", "fetch", "return", "allreduce",
                                                              "update")] + [_ms(st["step_s"]), 100 * st["comm_share"]]))
        else:
            lines.append("  scatter %s + compute %s + gradient exchange %s (%s) + update %s = %s per step: "
                         "communication %.0f%%" % (_ms(st["scatter_s"]), _ms(st["compute_s"]), _ms(st["exchange_s"]),
                                                   st["exchange"], _ms(st["update_s"]), _ms(st["step_s"]),
                                                   100 * st["comm_share"]))
        if st["exchange"] != "dense":       # the other way, and the option that takes it
            dense = ar["median_s"] + st["scatter_s"]
            lines.append("  with the whole gradient allreduced instead (%s): communication %.0f%%" % (
                "--table replicated --sparse-threshold 0" if st["exchange"] == "sharded" else "--sparse-threshold 0",
                100 * dense / (dense + st["compute_s"])))
    else:
        lines.append("step estimate: skipped (--model-size gives only a buffer size, no model to run)")
    for w in rep["warnings"]:
        lines.append("note: " + w)
    for p in rep["problems"]:
        lines.append("PROBLEM: " + p)
    lines.append("verdict: %s" % ("ok" if not rep["problems"] else "%d problem%s" % (
        len(rep["problems"]), "s"[:len(rep["problems"]) != 1])))
    return "\n".join(lines)


def run(args):
    from mpinn.comm import node  # start-up: --help needs no MPI (mpi4py starts it at import)
    from mpinn.training import open_job  # start-up: as node
    job = open_job()
    comm = job.comm
    unwired = node.unwired_srun(comm.size, os.environ)
    if unwired:
        raise MpinnError(unwired, collective=True)
    rank0 = comm.rank == 0
    path = args.hostfile or os.environ.get("HYDRA_HOST_FILE")
    # read on rank 0 only (the file may exist there alone), then known to every rank, which must all
    # reach the same verdict below
    hf = comm.bcast_obj(comm.root_call(lambda: parse_hostfile(path))) if path else None
    records = comm.allgather_obj(rank_record(comm, job.topology))
    problems = differences(records)
    warnings = host_notes(records)
    hostfile = None
    if hf is not None:
        errors, notes = check_hostfile_against_job(hf, records[0]["mpi"], records)
        if errors:      # every rank has the same records, so every rank reaches this together
            raise MpinnError(errors[0], collective=True)
        warnings = notes + warnings
        hostfile = {"path": hf.path, "syntax": hf.syntax, "slots": hf.slots, "description": hf.describe(),
                    "hosts": [{"line": no, "host": h, "slots": s} for no, h, s in hf.hosts],
                    "from": "--hostfile" if args.hostfile else "HYDRA_HOST_FILE"}
    if args.model_size:
        n, spec = args.model_size, None
    else:
        spec = default_spec(args)
        check_job(None, job.topology, spec, rules=(MODEL_MEMORY,))     # as training refuses it: before allocating
        n = spec.n_params
    ar = time_allreduce(comm, n, args.dtype, args.repeats)
    ar["bus_gb_s"] = bus_bandwidth(ar, comm.size)
    ar["what"] = "--model-size" if spec is None else "the model's gradient"
    lat = time_allreduce(comm, 1, args.dtype, max(args.repeats, 20))
    step = time_step(job, args, spec, args.repeats) if spec is not None else None
    rep = {"mpinn": __version__, "size": comm.size, "hosts": sorted({r["host"] for r in records}),
           "launcher": node.slurm_step(os.environ),
           "ranks": records, "hostfile": hostfile, "differences": problems, "allreduce": ar,
           "latency": lat, "step": step, "warnings": warnings, "problems": problems,
           "ok": not problems}
    if rank0:
        print(format_report(rep), flush=True)
        if args.json:
            with written_whole(args.json, "the report") as f:
                json.dump(rep, f, indent=1)
    return 1 if problems else 0


def build_parser():
    p = Parser(prog="python -m mpinn.doctor",
               description="Pre-flight for a cluster. Run it under the same launcher, hostfile and "
                           "environment as training (mpirun -f HOSTFILE -np N python -m mpinn.doctor). "
                           "It checks the hostfile, reports every rank's host, local rank, Python / numpy / "
                           "scipy / mpi4py / MPI versions and the GPU it would use, flags differences "
                           "between hosts, times an Allreduce of the model's gradient and estimates the "
                           "communication share of a training step.",
               epilog="Exit status: 0 all well, 1 the hosts differ, 2 a bad hostfile or option.")
    p.add_argument("--hostfile", help="hostfile to check (default: $HYDRA_HOST_FILE if set); MPICH "
                   "'host:slots' or Open MPI 'host slots=N'")
    p.add_argument("--json", help="also write the whole report as JSON here")
    p.add_argument("--repeats", type=positive_int, default=10, help="timed repetitions (default 10)")
    m = p.add_argument_group("model (as in mpinn.train; default: the default model)")
    m.add_argument("--model-size", type=positive_int,
                   help="time an Allreduce of this many elements instead of a model's gradient (no step estimate)")
    m.add_argument("--hash-bits", type=trick_bits, default=18, help="hashed columns = 2**bits, 1..30 (default 18)")
    m.add_argument("--hidden", type=hidden_sizes, default=(64,), help="hidden widths (default 64)")
    m.add_argument("--activation", default="relu", choices=["relu", "sigmoid", "tanh"])
    m.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    m.add_argument("--batch-size", type=positive_int, default=1024, help="GLOBAL batch (default 1024)")
    m.add_argument("--reduce", default="allreduce", choices=["allreduce", "gather"])
    m.add_argument("--sparse-threshold", type=nonneg_float, default=0.25)
    m.add_argument("--table", default="auto", choices=["auto", "replicated", "sharded"],
                   help="the hashed block as training would hold it (see mpinn.train --table; default auto)")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    from mpinn.comm.guard import run_guarded  # start-up: --help needs no MPI (mpi4py starts it at import)
    return run_guarded(run, args)


if __name__ == "__main__":
    sys.exit(main())
