"""A model file written as an ONNX model (python -m mpinn.export, mpinn.api.export): the graph of
mpinn.inference.onnx_graph, its inputs and output, the hashing contract and the model's header in its metadata, the
parameters inside it or, past protobuf's 2 GiB, in an external data file beside it; checked by onnx.checker."""
import json
import os

import numpy as np

from mpinn import __version__
from mpinn.core.errors import MpinnError
from mpinn.data.fit.transform import NumericTransform
from mpinn.hashing import per_feature_nnz
from mpinn.inference.load import load_checked
from mpinn.inference.onnx_graph import IR_VERSION, OPSET, Graph, nbytes, output_shape, prediction

# a model's parameters past this many bytes go to an external data file: protobuf refuses a message of 2 GiB, and
# the graph and the metadata need room beside the tensors
EXTERNAL_FROM = 2 ** 31 - 2 ** 26
ALIGN = 65536           # an external tensor's offset: ONNX Runtime maps such a file's pages instead of reading them
SMALL = 1 << 16         # tensors of fewer bytes stay inside the model even when the rest goes out


def cannot_express(spec, meta):
    """Why the graph cannot stand for the model (None when it can)."""
    if spec.n_sparse and not meta.get("hashing"):
        return ("its first layer reads the columns of a sparse matrix (source %r), with their values; the graph takes "
                "hashed categorical columns: score it with mpinn (Predictor, the estimator)" % meta.get("source"))
    if meta.get("task") == "binary" and spec.n_out != 1:
        return "a binary model with %d outputs: this mpinn writes one (P(positive))" % spec.n_out
    return None


class ExternalData:
    """Tensors written to `path` (beside the model, named by its base name), each at an aligned offset."""

    def __init__(self, path, onnx):
        self.path, self.onnx, self.at = path, onnx, 0
        self.f = open(path, "wb")
        self.location = os.path.basename(path)

    def __call__(self, name, pieces):
        if sum(p.nbytes for p in pieces) < SMALL:
            return None
        start = -(-self.at // ALIGN) * ALIGN
        self.f.write(b"\0" * (start - self.at))
        for p in pieces:
            self.f.write(memoryview(p.reshape(-1)).cast("B"))
        self.at = start + sum(p.nbytes for p in pieces)
        T = self.onnx.TensorProto
        t = T(name=name, data_type=self.onnx.helper.np_dtype_to_tensor_dtype(pieces[0].dtype),
              data_location=T.EXTERNAL)
        t.dims.extend([sum(p.shape[0] for p in pieces)] + list(pieces[0].shape[1:]))
        for k, v in (("location", self.location), ("offset", str(start)), ("length", str(self.at - start))):
            e = t.external_data.add()
            e.key, e.value = k, v
        return t

    def close(self):
        self.f.close()


def inputs_of(spec, meta):
    """The graph's inputs as the metadata describes them (what a client gives)."""
    out = {}
    contract = meta.get("hashing")
    if spec.n_sparse:
        per = per_feature_nnz(contract)
        out["ids"] = {"type": "int64", "shape": ["rows", "ids_per_row"], "features": list(contract["features"]),
                      "ids_per_feature": per, "ids_per_row": per * len(contract["features"]),
                      "padding_id": spec.n_sparse,
                      "meaning": "each row's hashed column ids, features in the order of `features` (per feature "
                                 "ids_per_feature ids), from the hashing contract (metadata `hashing`, docs/hashing.md);"
                                 " more ids per row may be given, the extra ones padding_id"}
    if spec.n_dense:
        columns = (meta.get("transform") or {}).get("columns") or meta.get("numeric") or [
            "x%d" % j for j in range(meta.get("n_features") or spec.n_dense)]
        out["numeric"] = {"type": "float64", "shape": ["rows", len(columns)], "columns": list(columns),
                          "meaning": "the raw numeric values, NaN for a missing one; the model's transform is in "
                                     "the graph"}
    return out


def export(model_path, out_path, external_from=EXTERNAL_FROM):
    """Write model file `model_path` as an ONNX model at `out_path`; its parameters go to `out_path`.data where they
    pass external_from bytes. Returns a dict: path, bytes, external (the data file, or None), opset."""
    # optional: onnx (the [onnx] extra)
    import onnx
    model, towers, meta = load_checked(model_path)
    spec = model.spec
    why = cannot_express(spec, meta)
    if why:
        raise MpinnError("%s cannot be written as an ONNX graph: %s" % (model_path, why))
    transform = NumericTransform.from_dict(meta["transform"]) if meta.get("transform") else None
    data_path = out_path + ".data" if nbytes(spec, towers) > external_from else None
    tmp = out_path + ".tmp"
    external = ExternalData(data_path + ".tmp", onnx) if data_path else None
    try:
        g = Graph(external)
        inputs = inputs_of(spec, meta)
        h = onnx.helper
        graph_inputs = []
        if "ids" in inputs:
            graph_inputs.append(h.make_tensor_value_info("ids", onnx.TensorProto.INT64, ["rows", "ids_per_row"]))
        if "numeric" in inputs:
            graph_inputs.append(h.make_tensor_value_info("numeric", onnx.TensorProto.DOUBLE,
                                                         ["rows", inputs["numeric"]["shape"][1]]))
        out = prediction(g, spec, model, towers, (meta.get("towers") or {}).get("weights"), transform,
                         "ids" if spec.n_sparse else None, "numeric" if spec.n_dense else None)
        g.nodes.append(h.make_node("Identity", [out], ["prediction"]))
        graph = h.make_graph(g.nodes, "mpinn", graph_inputs, [h.make_tensor_value_info(
            "prediction", onnx.TensorProto.DOUBLE, output_shape(spec))], initializer=g.inits)
        m = h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)], producer_name="mpinn",
                         producer_version=__version__, doc_string="mpinn model %s" % os.path.basename(model_path))
        m.ir_version = IR_VERSION
        h.set_model_props(m, metadata(spec, meta, inputs, len(towers)))
        if external is not None:
            external.close()
            os.replace(data_path + ".tmp", data_path)
            for t in m.graph.initializer:       # the data file's final name
                for e in t.external_data:
                    if e.key == "location":
                        e.value = os.path.basename(data_path)
        onnx.save_model(m, tmp)
        os.replace(tmp, out_path)
    except OSError as e:
        raise MpinnError("the ONNX model could not be written to %s (%s)" % (out_path, e.strerror or e))
    finally:
        if external is not None and not external.f.closed:
            external.close()
        for p in (tmp, data_path and data_path + ".tmp"):
            if p and os.path.exists(p):
                os.unlink(p)
    onnx.checker.check_model(out_path)       # by path: a model with external data, or past 2 GiB, too
    return {"path": out_path, "bytes": os.path.getsize(out_path), "external": data_path,
            "external_bytes": os.path.getsize(data_path) if data_path else 0, "opset": OPSET, "members": len(towers)}


def metadata(spec, meta, inputs, members):
    """metadata_props: `hashing` (the contract, the keys of the model file's header["meta"]["hashing"], JSON), the
    inputs and output described, and the model's header (spec, meta) for a client that reads rows as mpinn does."""
    task = meta["task"]
    output = {"binary": "P(positive class), classes[1]", "multiclass": "(rows, classes) probabilities",
              "regression": "the predicted value, in the label's units"}[task]
    return {"hashing": json.dumps(meta.get("hashing")), "task": task, "classes": json.dumps(meta.get("classes")),
            "inputs": json.dumps(inputs), "output": "prediction (float64): %s" % output,
            "opset": str(OPSET), "members": str(members), "mpinn_version": __version__,
            "mpinn_spec": json.dumps(spec.to_dict()), "mpinn_meta": json.dumps(meta, default=_json)}


def _json(v):
    return v.tolist() if isinstance(v, np.ndarray) else str(v)
