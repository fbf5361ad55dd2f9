"""Under mpiexec at np 1, 2, 3: with --input local every rank reads the packed file and fits the numeric
transform from its own pass; the statistics equal numpy's on the whole column, on every rank."""
import os
import tempfile

import numpy as np

from ranks import COMM, agree


def shared_dir():
    return COMM.bcast(tempfile.mkdtemp(prefix="mpinn-stats-") if COMM.rank == 0 else None)


def test_local_readers_statistics_equal_numpy_on_every_rank():
    import mpinn.api as mp
    from mpinn.data import DataSpec, HashSpec, load_csv
    from mpinn.data.packed.writing import write_dataset
    from mpinn.data.formats.tables import TableSource
    from mpinn.prepare import prepare
    d = shared_dir()
    rng = np.random.default_rng(3)
    n = 9001                              # two blocks and a bit: a part block at the end
    X = np.column_stack([np.minimum(rng.lognormal(9, 2.5, n), 1e6), 1e5 + rng.standard_normal(n),
                         np.where(rng.random(n) < 0.05, np.nan, rng.standard_normal(n))])
    names = ["money", "far", "gappy"]
    csv, with_stats, without = (os.path.join(d, f) for f in ("t.csv", "with.mpinn", "without.mpinn"))
    if COMM.rank == 0:
        with open(csv, "w") as f:
            f.write("c,money,far,gappy,y\n")
            for i, row in enumerate(X):
                f.write("k%d,%s,%d\n" % (i % 7, ",".join("" if np.isnan(v) else repr(float(v)) for v in row),
                                        (row[0] > 8000) ^ (i % 3 == 0)))
        prepare(TableSource(csv, "y", ["c"], names, chunk_rows=1000), with_stats)      # stats in the header
        mem = load_csv(csv, DataSpec("y", ["c"], names), HashSpec(bits=8))
        mem.meta.pop("numeric_stats")
        write_dataset(without, mem)            # no stats in the header: every rank takes them itself
    COMM.Barrier()
    seen = []
    for path in (with_stats, without):
        r = mp.train(path, input="local", epochs=1, hidden=(4,), dtype="float64", quiet=True,
                     model_out=os.path.join(d, "m.npz"))
        stats = r.meta["transform"]["stats"]
        ok = True
        for j in range(3):
            c = X[np.isfinite(X[:, j]), j]
            ok &= stats["count"][j] == c.size and stats["min"][j] == c.min() and stats["max"][j] == c.max()
            ok &= abs(stats["mean"][j] - c.mean()) <= 1e-12 * abs(c.mean())
            ok &= abs(stats["std"][j] ** 2 - c.var()) <= 1e-12 * c.var()
        agree(ok, "%s: %s" % (path, stats))
        same = COMM.allgather(r.meta["transform"])
        agree(all(s == same[0] for s in same), "ranks disagree")
        seen.append(stats)
    agree(seen[0] == seen[1], "prepare's statistics (1000-row chunks) differ from the readers'")
