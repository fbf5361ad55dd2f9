"""What every optimizer shares: its state arrays, the flat buffer's regions, L2 decay, the lazy row update."""
import numpy as np

from mpinn.core.batch import put_rows, take_rows
from mpinn.core.errors import MpinnError
from mpinn.host.heap import fresh_zeros
from mpinn.optim import fused

HASHED_UPDATES = ("lazy", "dense")


class Optimizer:
    """One step on the flat parameter buffer from the gradient already reduced over the ranks.

    step_(params, grads, rows=None, lo=0, hi=None, lr=...) updates elements lo:hi of the flat buffers
    (all of them by default; with rows, everything after the hashed block) and the hashed block's rows
    in `rows` (SparseRows), so a node's ranks can each take their part of one step on one shared copy
    of the parameters and of the state, and a rank of a sharded table its own rows. `grads` (and the
    rows) are scratch: a step may overwrite them. `lr` is this step's learning rate (the schedule's,
    mpinn.optim.schedule): an optimizer holds no rate of its own, so nothing it derives from the rate
    can go stale.

    The hashed block (the first n_rows x width elements: the table of the wide layer) is updated
    lazily by default (hashed_update="lazy"): only the rows a batch touched move, and only their
    state. For SGD without decay, Adagrad and FTRL that is exactly the dense update (an untouched row
    has zero gradient and does not move); for momentum and Adam it is their lazy variant, and
    weight decay is lazy L2 (lam * w added to the gradient of the touched rows only). With
    hashed_update="dense" the block is one more dense region: the exact dense formulas, every row
    every step.

    State: `element_state` names arrays the size of the parameters, `row_state` arrays of one value
    per table row; allocate_(zeros) makes them (private arrays, or one copy per node in shared
    memory, see training/steps.py); state() and load_state() are the checkpoint's view of them."""

    name = None
    weights_matter = False      # does the update differ between weights and biases (beyond decay)?
    element_state = ()          # state arrays of params.size elements
    lazy_row_state = ()         # state arrays of one value per row of the hashed block, when lazy
    row_state_dtype = None      # their dtype (None: the parameters')

    def __init__(self, size, xp, weight_decay=0.0, weight_slices=(), table=(0, 0), hashed_update="lazy"):
        if weight_decay < 0:
            raise MpinnError("weight decay must be >= 0, not %s" % weight_decay)
        if hashed_update not in HASHED_UPDATES:     # the option's choices keep other values off the command line
            raise ValueError("hashed_update must be lazy or dense, not %r" % hashed_update)
        self.size, self.xp = int(size), xp
        self.weight_decay, self.weight_slices = float(weight_decay), [tuple(s) for s in weight_slices]
        self.n_rows, self.width = int(table[0]), int(table[1])
        self.hashed_update = hashed_update
        self.t = 0
        self.arrays = None          # name -> state array (allocate_)
        self.writes_state = True    # False on the ranks that share another rank's copy (load_state)
        self._scratch = {}

    @property
    def table_size(self):
        return self.n_rows * self.width

    @property
    def sparse_ok(self):
        """Does the step take the hashed block's gradient as rows (see the class docstring)?"""
        return self.hashed_update == "lazy"

    @property
    def needs_touched_rows(self):
        """Must the step know which rows of the hashed block a batch touched? (A lazy update with
        state or decay; for plain SGD the dense update of an untouched row is no move at all.)"""
        return self.sparse_ok and (self.stateful or bool(self.weight_decay))

    @property
    def row_state(self):
        return self.lazy_row_state if self.sparse_ok and self.table_size else ()

    @property
    def stateful(self):
        return bool(self.element_state or self.row_state)

    # ---------------------------------------------------------------- state
    def allocate_(self, zeros=None, dtype=np.float64, writes_state=True):
        """Make the state arrays with zeros(shape, dtype) (default: private arrays). writes_state=False: the
        arrays are another rank's too (one copy per node), which alone writes a restored state into them."""
        self.writes_state = writes_state
        if zeros is None:       # on the host, large arrays in pages of their own (process.fresh_zeros)
            zeros = ((lambda shape, dt: fresh_zeros(shape[0], dt)) if self.xp is np
                     else (lambda shape, dt: self.xp.zeros(shape, dtype=dt)))
        self.arrays = {}
        for k in self.element_state:
            self.arrays[k] = zeros((self.size,), np.dtype(dtype))
        for k in self.row_state:
            self.arrays[k] = zeros((self.n_rows,), np.dtype(self.row_state_dtype or dtype))
        return self

    scalar_state = ()          # numbers the step keeps besides t (attributes; saved in checkpoints)

    def state(self):
        out = {"t": np.array([self.t], dtype=np.int64)}
        out.update({k: np.array([getattr(self, k)], dtype=np.float64) for k in self.scalar_state})
        if self.t:
            out.update(self.arrays or {})
        return out

    def load_scalars(self, state):
        """t and the scalar state from a checkpoint's state (each a one-element array)."""
        self.t = int(state["t"][0])
        for k in self.scalar_state:
            if k in state:
                setattr(self, k, float(state[k][0]))
            elif self.t:
                raise MpinnError("the checkpoint holds no %s state %r (written by another optimizer?)" % (self.name, k))

    def load_state(self, state):
        self.load_scalars(state)
        names = self.element_state + self.row_state
        if not self.t or not names:
            return
        missing = [k for k in names if k not in state]
        if missing:
            raise MpinnError("the checkpoint holds no %s state %r (written by another optimizer?)" % (
                self.name, missing[0]))
        for k in names:
            if tuple(state[k].shape) != tuple(self.arrays[k].shape):
                raise MpinnError("the checkpoint's optimizer state %r has shape %s, this run needs %s" % (
                    k, tuple(state[k].shape), tuple(self.arrays[k].shape)))
            if self.writes_state:
                self.arrays[k][...] = self.xp.asarray(state[k])

    def scratch(self, key, shape, dtype):
        """A reusable buffer (grown as needed): the step makes no temporaries the size of the parameters."""
        n = int(np.prod(shape))
        buf = self._scratch.get(key)
        if buf is None or buf.size < n or buf.dtype != dtype:
            buf = self._scratch[key] = self.xp.empty(max(n, 1), dtype=dtype)
        return buf[:n].reshape(shape)

    # ---------------------------------------------------------------- the step
    def step_(self, params, grads, rows=None, lo=0, hi=None, regions=None, *, lr):
        """One step at learning rate lr. regions: [(lo, hi), ...] in place of lo:hi, e.g. a sharded
        table's own rows and the dense layers (one step: the count t advances once)."""
        lr = float(lr)
        if not lr >= 0 or lr == float("inf"):
            raise MpinnError("the learning rate must be a finite number >= 0, not %s" % lr)
        if self.arrays is None:
            self.allocate_(dtype=params.dtype)
        if rows is not None and not self.table_size:     # made without table=: learn it from the rows
            self.n_rows, self.width = int(rows.n_rows), int(rows.width)
            for k in self.row_state:
                self.arrays[k] = self.xp.zeros(self.n_rows, dtype=self.row_state_dtype or params.dtype)
        self.t += 1
        if self.t == 1:
            self.first_step_(params)
        for lo, hi in regions if regions is not None else [(lo, self.size if hi is None else hi)]:
            if rows is not None:
                lo = max(lo, self.table_size)
            if hi > lo:
                self.dense_(params, grads, lo, hi, lr)
        if rows is not None and len(rows):
            self.rows_(params[:self.table_size].reshape(self.n_rows, self.width), rows, lr)
        self.end_step_(lr)

    def end_step_(self, lr):
        """After every part of a step (e.g. FTRL records the step's rate)."""

    def first_step_(self, params):
        """Before the first update (state just allocated or zero): e.g. FTRL's z from the initial weights."""

    def segments(self, lo, hi):
        """[(a, b, is_weight)]: elements lo:hi cut where weights and biases meet."""
        cuts = {lo, hi}
        for s, e in self.weight_slices:
            cuts.update(c for c in (s, e) if lo < c < hi)
        cuts = sorted(cuts)
        out = []
        for a, b in zip(cuts[:-1], cuts[1:]):
            out.append((a, b, any(s <= a and b <= e for s, e in self.weight_slices)))
        return out

    def dense_(self, params, grads, lo, hi, lr):
        """Elements lo:hi, segment by segment: L2 decay on the weights, then update_ (one segment
        where weights and biases are updated alike)."""
        parts = self.segments(lo, hi) if self.weight_decay or self.weights_matter else [(lo, hi, True)]
        for a, b, weight in parts:
            p, g = params[a:b], grads[a:b]
            if weight and self.weight_decay:
                tmp = self.scratch("decay", (b - a,), p.dtype)
                self.xp.multiply(p, p.dtype.type(self.weight_decay), out=tmp)
                g += tmp
            st = {k: self.arrays[k][a:b] for k in self.element_state}
            lib = self.fused_library(p.dtype)
            if lib is not None:
                self.fused_dense_(lib, p, g, st, weight, lr)
            else:
                self.update_(p, g, st, weight, None, lr)

    def coalesced(self, rows):
        """The rows with one gradient row per id, summed in the canonical tree (batch.coalesce): the kernels'
        k-way merge where they run, else numpy's (the same bits)."""
        leaves = rows.leaves()
        if self.xp is not np or len(leaves) < 2:
            return rows.coalesced()
        return fused.coalesce_rows(leaves, rows.n_rows, rows.width, leaves[0][1].dtype)

    def rows_(self, table, rows, lr):
        """The touched rows (coalesced: one gradient row per id): gathered, updated, written back.
        The table's rows are weights: lazy L2 adds lam * w to the touched rows' gradient."""
        rows = self.coalesced(rows)
        ids, g = rows.ids, rows.rows
        full = {name: self.arrays[name][:self.table_size].reshape(self.n_rows, self.width)
                for name in self.element_state}
        lib = self.fused_library(table.dtype) if self.fused_rows else None
        if lib is not None:         # in place, row by row, by id: no gather, no write-back
            fused.rows(lib, self.kernel, table, ids, g, *full.values(),
                       row_state=self.arrays[self.row_state[0]] if self.row_state else None,
                       consts=self.consts(True, True, lr), steps=self.row_steps())
            return
        p = self.gather(table, ids, "rows_p")
        if self.weight_decay:
            g += p.dtype.type(self.weight_decay) * p
        st = {name: self.gather(arr, ids, "rows_" + name) for name, arr in full.items()}
        rst = {name: self.gather(self.arrays[name], ids, "rows_" + name) for name in self.row_state}
        self.update_(p, g, st, True, rst, lr)
        self.scatter(table, ids, p)
        for name, arr in full.items():
            self.scatter(arr, ids, st[name])
        for name in self.row_state:
            self.scatter(self.arrays[name], ids, rst[name])

    # ---------------------------------------------------------------- fused kernels (mpinn/fused.py)
    kernel = None               # the name of the optimizer's kernels in mpinn/fused.c
    fused_rows = True           # is there a row kernel for this configuration?

    def fused_library(self, dtype):
        """The compiled kernels when they serve this update (host arrays of float32/64), else None:
        the numpy passes of update_ run, with the same bits."""
        if self.kernel is None or self.xp is not np or np.dtype(dtype) not in fused.TYPES:
            return None
        return fused.library()

    def consts(self, weight, rows, lr):
        """The kernel's constants (fused.consts: a struct named field by field, see fused.c) for weights
        or biases, dense elements or table rows, at learning rate lr."""
        raise NotImplementedError

    def row_steps(self):
        """A float64 table indexed by a row's step count (Adam's step factor); None for the others."""
        return None

    def fused_dense_(self, lib, p, g, st, weight, lr):
        fused.dense(lib, self.kernel, p, g, *(st[k] for k in self.element_state),
                    consts=self.consts(weight, False, lr))

    def gather(self, a, ids, key):
        """Rows ids of the 2-D array a, into a reusable buffer (on the host, batch.take_rows)."""
        out = self.scratch(key, (ids.shape[0],) + a.shape[1:], a.dtype)
        if self.xp is np:
            return take_rows(a, ids, out)
        self.xp.take(a, ids, axis=0, out=out)
        return out

    def scatter(self, a, ids, rows):
        """a[ids] = rows (see gather)."""
        if self.xp is np:
            put_rows(a, ids, rows)
        else:
            a[ids] = rows

    def update_(self, p, g, st, weight, row_st, lr):
        """The optimizer's formula at learning rate lr, in place on p and on its state views st (and,
        for table rows, row_st: the rows' per-row state; None for dense elements). weight: are these
        weights?"""
        raise NotImplementedError
