"""A model file's header against its architecture: the inputs its columns, hashing contract and numeric transform
give the rows must be the inputs its parameters take."""
from mpinn.data.fit.transform import NumericTransform
from mpinn.hashing import contract_problem

TABLES = ("csv", "parquet", "criteo", "default", "dataframe")      # sources read by named columns


def inputs_problem(meta, spec):
    """None when the rows read as header `meta` says (the hashing contract's columns, the numeric columns through
    the transform) fit architecture `spec` (a ModelSpec, itself checked against the parameters' count), else what
    differs: predicting would fail in a product of mismatched shapes, or hash to columns the model does not have."""
    contract = meta.get("hashing")
    if contract is not None:
        why = contract_problem(contract) if isinstance(contract, dict) else "its hashing contract is not valid"
        if why:
            return why
        if contract["n_columns"] != spec.n_sparse:
            return "its hashing contract gives %d input columns, its architecture has %d hashed inputs" % (
                contract["n_columns"], spec.n_sparse)
    elif meta.get("source") in TABLES and spec.n_sparse:
        return "its architecture has %d hashed inputs and its header no hashing contract" % spec.n_sparse
    transform, numeric = meta.get("transform"), meta.get("numeric") or []
    if isinstance(transform, dict):
        t = NumericTransform.from_dict(transform)
        if meta.get("source") in TABLES and list(numeric) != t.columns:
            return "its numeric columns %s are not its transform's %s" % (list(numeric), t.columns)
        dense, says = t.n_out, "its numeric transform gives %d dense inputs" % t.n_out
    elif meta.get("source") in TABLES:
        dense, says = len(numeric), "it names %d numeric columns" % len(numeric)
    elif meta.get("source") in ("npz", "mat") and isinstance(meta.get("n_features"), int):
        dense, says = meta["n_features"], "it says %d features" % meta["n_features"]
    else:
        return None
    if dense != spec.n_dense:
        return "%s, its architecture has %d" % (says, spec.n_dense)
    return None
