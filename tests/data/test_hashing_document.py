"""docs/hashing.md is exact: its test vectors are computed again here by an implementation written from the page
alone (xxhash and the standard library; mpinn.hashing is not imported for it), and mpinn's own reading and hashing
of the same values (the Predictor's row dicts and DataFrames, mpinn.hashing on lists) gives the same ids."""
import json
import math
import os
import re

import pytest
import xxhash

from conftest import ROOT

PAGE = os.path.join(ROOT, "docs", "hashing.md")
MASK64 = 2**64 - 1


# ---------------------------------------------------------------- the page: its contracts and vector tables
def _page():
    return open(PAGE, encoding="utf-8").read()


def contracts():
    """The JSON block under 'Test vectors': {name: contract}."""
    text = _page().split("## Test vectors", 1)[1]
    return json.loads(re.search(r"```json\n(.*?)\n```", text, re.S).group(1))


def vectors(direct):
    """[(number, contract name, feature, value, text, ids)] of the row-dict table (direct=False) or of the
    table of values given to mpinn.hashing directly (numbers d1, d2, ...)."""
    out = []
    for line in _page().split("## Test vectors", 1)[1].split("\n"):
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")] if line.startswith("| ") else []
        if len(cells) != 6 or not re.fullmatch(r"d?\d+", cells[0]) or cells[0].startswith("d") != direct:
            continue
        n, name, feature, value, text, ids = cells
        out.append((n, name, feature, json.loads(value.strip("`")), json.loads(text.strip("`")),
                    [int(x) for x in ids.split()]))
    return out


# ---------------------------------------------------------------- the independent implementation, from the page
def row_text(v):
    """'Row dicts and pandas DataFrames': the text of one value."""
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, int):
        return str(v)
    f = float(v)
    if f != f:
        return ""
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    if abs(f) < 2.0**53 and f == math.floor(f):
        return "%d" % int(f)
    return repr(f)          # the shortest round-trip decimal, as the page describes


def direct_text(v):
    """'Values given to mpinn.hashing directly': str(value), missing the empty text."""
    if v is None or (isinstance(v, float) and v != v):
        return ""
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def ids_of(c, feature, text):
    """The page's modes: a feature's ids for a value's text under contract c."""
    j = c["features"].index(feature)
    seed = int(c["seed"]) & MASK64
    if c["mode"] == "trick":
        data = (feature + "=" + text) if c.get("prefix", True) else text
        return [xxhash.xxh64_intdigest(data.encode("utf-8"), seed) % (1 << c["bits"])]
    if c["mode"] == "split":
        k, b = c["k"], c["buckets"][j]
        assert c["feature_seeds"][j] == xxhash.xxh64_intdigest(feature.encode("utf-8"), seed)
        d = xxhash.xxh64_intdigest(text.encode("utf-8"), c["feature_seeds"][j])
        w = 64 // k
        return [c["offsets"][j] + i * b + ((d >> (w * i)) & ((1 << w) - 1)) % b for i in range(k)]
    assert c["mode"] == "onehot"
    vocab = c["vocab"][j]
    return [c["offsets"][j] + (vocab.index(text) if text in vocab else len(vocab))]


def test_the_page_has_the_vectors_it_promises():
    rows, cs = vectors(False), contracts()
    assert len(rows) >= 20 and len(vectors(True)) >= 5
    assert {cs[r[1]]["mode"] for r in rows} == {"trick", "split", "onehot"}
    assert len({(cs[r[1]]["seed"], cs[r[1]].get("bits")) for r in rows if cs[r[1]]["mode"] == "trick"}) >= 2
    kinds = {type(r[3]).__name__ for r in rows}
    assert {"str", "int", "float", "bool", "NoneType"} <= kinds


@pytest.mark.parametrize("direct", [False, True], ids=["rows", "direct"])
def test_the_independent_implementation_gives_the_pages_ids(direct):
    cs, text_of = contracts(), (direct_text if direct else row_text)
    for n, name, feature, value, text, ids in vectors(direct):
        assert text_of(value) == text, "vector %s: the text of %r" % (n, value)
        assert ids_of(cs[name], feature, text) == ids, "vector %s" % n


# ---------------------------------------------------------------- mpinn agrees
def _mpinn_ids(c, feature, cats):
    from mpinn.hashing import encode_indices, per_feature_nnz
    per = per_feature_nnz(c)
    j = c["features"].index(feature)
    return [int(x) for x in encode_indices(cats, c)[0][j * per:(j + 1) * per]]


def test_the_pages_contracts_are_what_mpinn_makes():
    from mpinn.hashing import HASHING_VERSION, contract_problem
    for name, c in contracts().items():
        assert contract_problem(c) is None, name
        assert int(c.get("version", 1)) <= HASHING_VERSION


def test_mpinn_reads_and_hashes_rows_and_frames_to_the_pages_ids():
    pd = pytest.importorskip("pandas")
    from mpinn.data.formats.frames import DictSource, FrameSource
    cs = contracts()
    for n, name, feature, value, text, ids in vectors(False):
        c = cs[name]
        row = {f: (value if f == feature else "x") for f in c["features"]}
        source = DictSource([row], c["features"], [])
        assert source.part.cats[c["features"].index(feature)][0] == text, "vector %s (row dict)" % n
        assert _mpinn_ids(c, feature, source.part.cats) == ids, "vector %s (row dict)" % n
        frame = pd.DataFrame({f: pd.Series([v]) for f, v in row.items()})
        cats = FrameSource(frame, c["features"], []).part.cats
        assert cats[c["features"].index(feature)][0] == text, "vector %s (DataFrame)" % n
        assert _mpinn_ids(c, feature, cats) == ids, "vector %s (DataFrame)" % n


def test_mpinn_hashes_values_given_directly_to_the_pages_ids():
    cs = contracts()
    for n, name, feature, value, text, ids in vectors(True):
        c = cs[name]
        columns = {f: [value if f == feature else "x"] for f in c["features"]}
        assert _mpinn_ids(c, feature, columns) == ids, "vector %s" % n
