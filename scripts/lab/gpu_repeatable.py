"""Are the hashed block's products the same bits every run on this GPU? (issue 39; needs cupy and a GPU)

    python -m scripts.lab.gpu_repeatable

A 1024-row batch of 20 Zipf ids a row (hot columns summing hundreds of rows), 20 runs each of: cuSPARSE's SpMM
with op(A) transposed (what mpinn used for X^T @ D before 2026-11-27), and mpinn's Backend.sparse_t_matmul and
sparse_matmul (transpose_csr and the rows_times kernel). It prints, for each, how many distinct results the 20
runs gave and whether the first equals scipy's bit for bit. Measured on an H200 (cupy 14.2): cuSPARSE 20
distinct, mpinn's 1 distinct and equal to scipy's.
"""
import argparse

import numpy as np
import scipy.sparse as sp


def main(argv=None):
    argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 2)[2],
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    import cupy
    import cupyx.scipy.sparse as cs
    from cupyx import cusparse
    from mpinn.device.backend import get_backend

    rng = np.random.default_rng(7)
    n, width = 1024, 20000
    cols = np.minimum(rng.zipf(1.1, size=(n, 20)) - 1, width - 1)
    X = sp.csr_matrix((np.ones(n * 20, np.float32), cols.ravel(), 20 * np.arange(n + 1)), shape=(n, width))
    D = rng.standard_normal((n, 65)).astype(np.float32)
    W = rng.standard_normal((width, 65)).astype(np.float32)
    b = get_backend("cupy")

    def transposed_spmm():
        Xd = cs.csr_matrix(X)
        Xd.sum_duplicates()
        return cusparse.spmm(Xd, cupy.asarray(D).T, transa=True, transb=True).get()

    cases = (("cuSPARSE SpMM, op(A) transposed: X^T D", transposed_spmm, X.T @ D),
             ("mpinn sparse_t_matmul: X^T D", lambda: b.sparse_t_matmul(cs.csr_matrix(X), cupy.asarray(D)).get(),
              X.T @ D),
             ("mpinn sparse_matmul: X W", lambda: b.sparse_matmul(cs.csr_matrix(X), cupy.asarray(W)).get(), X @ W))
    for name, f, want in cases:
        runs = [f() for _ in range(20)]
        print("%s: %d distinct results in 20 runs, max |diff| from scipy %.2e, scipy's bits: %s" % (
            name, len({r.tobytes() for r in runs}), np.abs(runs[0] - want).max(), np.array_equal(runs[0], want)))


if __name__ == "__main__":
    main()
