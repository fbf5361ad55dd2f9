"""A model as an ONNX graph, node by node, the arithmetic of mpinn's predict: the numeric transform (float64, as
NumericTransform.apply), the hashed first layer (a gather of the table's rows summed per row), the dense inputs,
the periodic embeddings, the wide part and the MLP (mpinn.model.mlp), the head (head_output), the members' mix
(mpinn.training.towers.mix, float64) and the target's scale undone. mpinn.inference.onnx_export writes it."""
import numpy as np

from mpinn.model.periodic import TWO_PI

OPSET = 17          # ONNX's default domain; ONNX Runtime 1.13 and later run it
IR_VERSION = 8      # the IR of opset 17's release: readers older than the onnx package that writes it


class Graph:
    """Nodes and initializers, made with onnx's helpers. external(name, pieces): a TensorProto whose data went to the
    external data file, or None to keep the tensor inside the model."""

    def __init__(self, external=None):
        # optional: onnx (the [onnx] extra)
        import onnx
        self.onnx, self.helper, self.arrays = onnx, onnx.helper, onnx.numpy_helper
        self.nodes, self.inits, self.n, self.external = [], [], 0, external
        self._consts = {}

    def name(self, stem):
        self.n += 1
        return "%s_%d" % (stem, self.n)

    def const(self, array, stem="c", dtype=None):
        """An initializer: `array` (or a list of arrays, its rows one after another: a table and its padding row)."""
        pieces = [np.ascontiguousarray(a, dtype=dtype) for a in (array if isinstance(array, list) else [array])]
        small = len(pieces) == 1 and pieces[0].size <= 16
        key = (pieces[0].dtype.str, pieces[0].shape, pieces[0].tobytes()) if small else None
        if key in self._consts:         # the same small constant (0, 1, an axis) once
            return self._consts[key]
        name = self.name(stem)
        t = self.external(name, pieces) if self.external is not None else None
        self.inits.append(t if t is not None else self.arrays.from_array(np.concatenate(pieces) if len(pieces) > 1
                                                                         else pieces[0], name))
        if small:
            self._consts[key] = name
        return name

    def op(self, op_type, inputs, stem=None, **attrs):
        out = self.name(stem or op_type.lower())
        self.nodes.append(self.helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def cast(self, x, dtype):
        return self.op("Cast", [x], to=int(self.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))))

    def cols(self, x, lo, hi, axis=1):
        """x[:, lo:hi] (axis 1), or along `axis`."""
        return self.op("Slice", [x, self.const(np.array([lo], np.int64)), self.const(np.array([hi], np.int64)),
                                 self.const(np.array([axis], np.int64))])

    def take(self, x, columns):
        return self.op("Gather", [x, self.const(np.asarray(columns, np.int64))], axis=1)


def numeric_inputs(g, x, t, dtype):
    """x: (N, columns) float64 raw values (NaN: missing) -> (N, n_dense) network inputs in the model's dtype: the
    transform `t` (a NumericTransform, None: values as they are), in float64, then cast (Rows.batch's order)."""
    if t is None:
        return g.cast(x, dtype)
    f64 = lambda v: g.const(np.asarray(v, np.float64))      # noqa: E731
    finite = g.op("Less", [g.op("Abs", [x]), f64(np.inf)])      # ~isfinite: NaN < inf is false
    missing = g.op("Not", [finite])
    x = g.op("Where", [finite, x, f64(0.0)])        # a missing cell's value is overwritten below: no NaN goes on
    V = g.op("Min", [g.op("Max", [x, f64(t.lo)]), f64(t.hi)])          # np.clip
    parts = []
    if t.bins is not None and t.bins.n_out:
        b = t.bins
        E = g.op("Min", [g.op("Max", [g.take(V, b.cols), f64(b.x_lo)]), f64(b.x_hi)])
        E = g.op("Div", [g.op("Sub", [E, f64(b.left)]), f64(b.width)])
        E = g.op("Min", [g.op("Max", [E, f64(b.below)]), f64(b.above)])
        parts.append(g.op("Where", [g.take(missing, b.cols), f64(0.0), E]))
    if t.log_cols:
        logged = g.op("Log", [g.op("Add", [g.op("Max", [V, f64(0.0)]), f64(1.0)])])      # log1p(max(x, 0))
        mask = np.zeros(t.n_in, bool)
        mask[t.log_cols] = True
        V = g.op("Where", [g.const(mask), logged, V])
    V = g.op("Div", [g.op("Sub", [V, f64(t.center)]), f64(t.scale)])
    V = g.op("Where", [missing, f64(t.fill), V])
    if t.indicators:
        parts.insert(0, g.cast(g.take(missing, t.indicators), np.float64))
    out = g.op("Concat", [V] + parts, axis=1) if parts else V
    return g.cast(out, dtype)


def periodic(g, Xd, pspec, flat, dtype):
    """H (N, m*d) of mpinn.model.periodic.Periodic.forward: relu(v_j W_j + b_j), v_j = [cos, sin](2 pi c_j x_j)."""
    m, k, d = int(pspec["columns"]), int(pspec["frequencies"]), int(pspec["width"])
    c = flat[:m * k].reshape(m, k)
    W = flat[m * k:m * k + m * 2 * k * d].reshape(m, 2 * k, d)
    b = flat[m * k + m * 2 * k * d:].reshape(m, 1, d)
    z = g.op("Mul", [g.op("Unsqueeze", [g.cols(Xd, 0, m), g.const(np.array([2], np.int64))]),
                     g.const(c * dtype.type(TWO_PI))])                              # (N, m, k)
    v = g.op("Concat", [g.op("Cos", [z]), g.op("Sin", [z])], axis=2)                # (N, m, 2k)
    h = g.op("MatMul", [g.op("Transpose", [v], perm=[1, 0, 2]), g.const(W)])        # (m, N, d)
    h = g.op("Relu", [g.op("Add", [h, g.const(b)])])
    return g.op("Reshape", [g.op("Transpose", [h], perm=[1, 0, 2]), g.const(np.array([0, m * d], np.int64))])


def member(g, spec, model, params, ids, Xd):
    """One parameter vector's head input z (N, n_out), as MLP.forward: the first layer (hashed rows summed, the dense
    inputs, the periodic embeddings, its bias), the hidden layers, the wide part added to the output."""
    model.params[...] = params
    dtype = model.dtype
    W, b = model.W, model.b
    parts = []
    if spec.n_sparse:       # the table, and one row of zeros after it: the padding id's
        table = g.const([W[0][:spec.n_sparse], np.zeros((1, W[0].shape[1]), dtype)], "table")
        rows = g.op("Gather", [table, ids], axis=0)                                    # (N, width, h)
        parts.append(g.op("ReduceSum", [rows, g.const(np.array([1], np.int64))], keepdims=0))
    if spec.n_dense:
        dense_end = spec.n_sparse + spec.n_dense
        parts.append(g.op("MatMul", [Xd, g.const(W[0][spec.n_sparse:dense_end])]))
        if model.periodic is not None:
            H = periodic(g, Xd, spec.periodic, params[model.periodic_at[0]:model.periodic_at[1]].copy(), dtype)
            parts.append(g.op("MatMul", [H, g.const(W[0][dense_end:])]))
    z = parts[0]
    for p in parts[1:]:         # ((X W) + Xd W) + H W, then the bias: the order of _first_layer's sums
        z = g.op("Add", [z, p])
    z = g.op("Add", [z, g.const(b[0])])
    wide = None
    if model.deep_width is not None:
        z, wide = g.cols(z, 0, model.deep_width), g.cols(z, model.deep_width, W[0].shape[1])
    act = {"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid"}[spec.activation]
    for l in range(1, model.n_layers):
        if l > 1:
            z = g.op("Add", [z, g.const(b[l - 1])])
        z = g.op("MatMul", [g.op(act, [z]), g.const(W[l])])
    if model.n_layers > 1:
        z = g.op("Add", [z, g.const(b[-1])])
    if wide is not None:
        z = g.op("Add", [z, wide])
    return z


def head(g, loss, z, n_out):
    """head_output: softmax's probabilities, sigmoid's (P(positive) for one output), a regression's values."""
    if loss == "softmax":
        return g.op("Softmax", [z], axis=1)
    if loss == "sigmoid":
        z = g.op("Sigmoid", [z])
    return g.op("Squeeze", [z, g.const(np.array([1], np.int64))]) if n_out == 1 else z


def prediction(g, spec, model, towers, weights, transform, ids, x):
    """The graph's output (float64): each member's head, mixed (the mean, or the towers' fitted weights), in the
    label's units (a regression's target scale undone), as mpinn.inference.score.predict_with."""
    Xd = numeric_inputs(g, x, transform, model.dtype) if spec.n_dense else None
    preds = [g.cast(head(g, spec.loss, member(g, spec, model, p, ids, Xd), spec.n_out), np.float64) for p in towers]
    out = preds[0]
    if len(preds) > 1:
        w = np.full(len(preds), 1.0 / len(preds)) if weights is None else np.asarray(weights, np.float64)
        out = g.op("Sum", [g.op("Mul", [p, g.const(np.float64(wt))]) for p, wt in zip(preds, w)])
    if transform is not None and transform.target is not None:
        c, s = transform.target
        out = g.op("Add", [g.op("Mul", [out, g.const(np.float64(s))]), g.const(np.float64(c))])
    return out


def output_shape(spec):
    """The output's shape: (rows,) for one output (P(positive), a value), (rows, outputs) otherwise."""
    return ["rows"] if spec.n_out == 1 else ["rows", spec.n_out]


def nbytes(spec, towers):
    """The parameters the graph holds, the padding rows included."""
    return towers.nbytes + len(towers) * (spec.first_width if spec.n_sparse else 0) * towers.itemsize
