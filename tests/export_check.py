#!/usr/bin/python3
"""Checks an export file against the model it was exported from, with h5py
and scipy only (Debian's python3-h5py and python3-scipy).

    /usr/bin/python3 tests/export_check.py EXPORT.csr.h5 MODEL.h5 [DECODED.txt]

Every /layers/<name> group is read with the reader documented in
docs/export-format.md (the snippet's read_layer, taken from the document
and run as it is) and compared with the dense BN-folded weights computed
here from the model's /params and /buffers (the BN to fold is found from the
network description, independently of the export); also checked: indptr,
ascending indices in the narrowest type, the folded bias, exactly the
model's non-zeros (BSR layers: exactly its kept blocks, read by scipy as a
bsr_matrix of the stored block size; hybrid layers: whole kept blocks plus a
remainder holding the other non-zeros), and for codebook layers that the codebook and codes are
quantize's (/quant), with row scales (quantize --row-scale) row_scale =
quantize's scale times the BN scale, the decoded fp32 values being the
model's weights bit for bit where no BN is folded. DECODED.txt, the
toolkit's own decode (build/helpers/export_decode), must equal what the
snippet reads bit for bit. Prints ok/FAIL lines and
"export_check.py: N passed, N failed, N skipped"; without h5py/scipy the
check is skipped.
"""
import sys

NAME = "export_check.py"


def text(v):
    """A string attribute as str (h5py returns fixed-length strings as bytes)."""
    return v.decode() if isinstance(v, bytes) else v


def summary(passed, failed, skipped):
    print(f"{NAME}: {passed} passed, {failed} failed, {skipped} skipped")
    sys.exit(1 if failed else 0)


try:
    import h5py
    import numpy as np
    import scipy.sparse as sp
except ImportError as e:  # the test is skipped, not failed
    print(f"  skip: {e}")
    summary(0, 0, 1)


def parse_desc(text):
    """Layers of a network description: dicts with kind, name, src, src2, eps."""
    layers = []
    for line in text.splitlines():
        toks = line.split("#", 1)[0].split()
        if not toks:
            continue
        kv = dict(t.split("=", 1) for t in toks[1:] if "=" in t)
        pos = [t for t in toks[1:] if "=" not in t]
        names = [l["name"] for l in layers]

        def find(n):
            return -1 if n == "input" else len(names) - 1 - names[::-1].index(n)

        i = len(layers)
        layers.append({
            "kind": toks[0],
            "name": kv.get("name", f"{toks[0]}{i + 1}"),
            "src": find(kv["from"]) if "from" in kv else i - 1,
            "src2": find(pos[0]) if toks[0] == "add" else None,
            "eps": float(np.float32(kv.get("eps", "1e-5"))),
        })
    return layers


def folded_bn(layers, i):
    """Index of the BN folded into layer i: its only reader, when a BN."""
    readers = [j for j, l in enumerate(layers) for s in (l["src"], l["src2"]) if s == i]
    if len(readers) == 1 and layers[readers[0]]["kind"] == "bn":
        return readers[0]
    return None


def dense_folded(model, layers, i):
    """Dense (K, C*R*S) weights and (K) bias of layer i with its BN folded."""
    name = layers[i]["name"]
    w = model[f"params/{name}.weight"][()].astype(np.float64)
    w = w.reshape(w.shape[0], -1)
    b = model[f"params/{name}.bias"][()].astype(np.float64) if f"params/{name}.bias" in model \
        else np.zeros(w.shape[0])
    bn = folded_bn(layers, i)
    if bn is None:
        return w, b, None, np.ones(w.shape[0])
    n = layers[bn]["name"]
    g, beta = model[f"params/{n}.gamma"][()], model[f"params/{n}.beta"][()]
    mu, var = model[f"buffers/{n}.mean"][()], model[f"buffers/{n}.var"][()]
    scale = g.astype(np.float64) / np.sqrt(var.astype(np.float64) + layers[bn]["eps"])
    return w * scale[:, None], (b - mu) * scale + beta, n, scale


def doc_reader():
    """read_layer and dense_weights from the Python snippet of docs/export-format.md, run as written."""
    import os
    doc = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "export-format.md")
    text = open(doc, encoding="utf-8").read()
    block = [b for b in text.split("```python\n")[1:] if "def read_layer" in b][0].split("```")[0]
    scope = {}
    exec(block.split("\nwith h5py.File")[0], scope)  # the imports, read_layer and dense_weights
    return scope["read_layer"], scope["dense_weights"]


def layer_codes(g, n):
    """The 4-bit code of each of the n real entries of a codebook layer."""
    c = g["codes"][()]
    return np.stack([c & 15, c >> 4], axis=1).ravel()[:n].astype(np.int64)


def decoded(path):
    """The toolkit's decode: {name: (dense float32 (K, cols), bias float32 (K))}."""
    out, lines = {}, open(path).read().splitlines()
    for i in range(0, len(lines), 3):
        name, k, cols = lines[i].split()
        w = np.array(lines[i + 1].split(), np.float32).reshape(int(k), int(cols))
        out[name] = (w, np.array(lines[i + 2].split(), np.float32))
    return out


def check_quant(g, model, name, rows, idx, code, scale, bn):
    """Problems of a codebook layer against quantize's /quant/<name>.weight."""
    key = f"quant/{name}.weight"
    if "quant" not in model or key not in model or "codebook" not in model[key]:
        return []
    q, bad = model[key], []
    k = int(g.attrs["shape"][0])
    cb = q["codebook"][()].astype(np.float32)
    if not np.array_equal(g["codebook"][()].astype(np.float32), cb):
        bad.append("codebook is not quantize's")
    qidx = q["indices"][()].reshape(k, -1)
    if not np.array_equal(code, qidx[rows, idx]):
        bad.append("codes are not quantize's indices")
    if "row_scale" not in q:
        return bad
    qs = q["row_scale"][()].astype(np.float32)
    rs = g["row_scale"][()].astype(np.float32)
    if np.abs(rs - qs * scale).max(initial=0) > 1e-6 * np.abs(qs * scale).max(initial=0):
        bad.append("row_scale is not quantize's times the BN scale")
    if bn is None:
        w = model[f"params/{name}.weight"][()].reshape(k, -1)
        dec = cb[np.minimum(code, len(cb) - 1)] * rs[rows]  # float32 product, rounded once
        if not np.array_equal(rs, qs) or not np.array_equal(dec, w[rows, idx]):
            bad.append("decoded values are not the quantized weights bit for bit")
    return bad


def block_size(g):
    """(kb, cb) of a BSR layer, (1, 1) for CSR."""
    if text(g.attrs["encoding-type"]) != "bsr_matrix":
        return 1, 1
    return tuple(int(v) for v in g.attrs["blocksize"])


def entries(g, shape, ptr, idx):
    """Row and (c, r, s) column of every stored entry, in the stored order."""
    if text(g.attrs["encoding-type"]) != "bsr_matrix":
        return np.repeat(np.arange(shape[0]), np.diff(ptr)), idx
    kb, cb = block_size(g)
    c, rs = int(g.attrs["in_c"]), int(np.prod(g.attrs["k"]))
    brow = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    rows = np.broadcast_to(brow[:, None, None] * kb + np.arange(kb)[None, :, None], (len(idx), kb, cb)).ravel()
    col = np.broadcast_to(idx[:, None, None] * cb + np.arange(cb)[None, None, :], (len(idx), kb, cb)).ravel()
    return rows, (col % c) * rs + col // c  # col = t*C + channel


def check_index(g, shape, ptr, idx):
    """Problems of indptr and indices (range, order, narrowest type) over
    rows (CSR) or block rows (BSR); the stored entries' rows and columns."""
    bad = []
    kb, cb = block_size(g)
    nrows, ncols = shape[0] // kb, shape[1] // cb
    if len(ptr) != nrows + 1 or ptr[0] != 0 or ptr[-1] * kb * cb != int(g.attrs["nnz"]) or (np.diff(ptr) < 0).any():
        bad.append("indptr does not run from 0 to nnz")
    rows = np.repeat(np.arange(nrows), np.diff(ptr))
    step = np.diff(idx.astype(np.int64))
    if ((step <= 0) & (rows[1:] == rows[:-1])).any() or (idx >= ncols).any():
        bad.append("indices not ascending within a row or out of range")
    want = np.uint8 if ncols <= 256 else np.uint16 if ncols <= 65536 else np.int32
    if g["indices"].dtype != want:
        bad.append(f"indices are {g['indices'].dtype}, the narrowest type is {np.dtype(want)}")
    return bad, entries(g, shape, ptr, idx)


def check_stored(g, model, name, raw, rows, idx):
    """Problems of the stored entries: CSR exactly the model's non-zeros;
    BSR exactly the model's kept weights (the mask's whole blocks), which
    hold every non-zero."""
    if text(g.attrs["encoding-type"]) != "bsr_matrix":
        if int(g.attrs["nnz"]) != np.count_nonzero(raw) or np.count_nonzero(raw[rows, idx]) != len(idx):
            return ["the rows do not hold exactly the model's non-zeros"]
        return []
    key = f"masks/{name}.weight"  # none for a weight that is never pruned (all kept)
    mask = model[key][()].reshape(raw.shape) if key in model else np.ones(raw.shape)
    if int(g.attrs["nnz"]) != np.count_nonzero(mask) or not mask[rows, idx].all() \
            or np.count_nonzero(raw[rows, idx]) != np.count_nonzero(raw):
        return ["the blocks do not hold exactly the model's kept weights"]
    return []


def check_remainder(g, shape, brows, bidx):
    """Problems of a hybrid layer's remainder (indptr, ascending indices in the
    narrowest type, none inside a kept block); its entries' rows and (c, r, s) columns."""
    bad = []
    r = g["remainder"]
    ptr, idx = r["indptr"][()], r["indices"][()].astype(np.int64)
    if text(r.attrs["encoding-type"]) != "csr_matrix" or tuple(int(v) for v in r.attrs["shape"]) != shape:
        bad.append("the remainder is not a csr_matrix of the layer's shape")
    if len(ptr) != shape[0] + 1 or ptr[0] != 0 or ptr[-1] != int(r.attrs["nnz"]) or (np.diff(ptr) < 0).any():
        bad.append("remainder indptr does not run from 0 to nnz")
    rows = np.repeat(np.arange(shape[0]), np.diff(ptr))
    if ((np.diff(idx) <= 0) & (rows[1:] == rows[:-1])).any() or (idx >= shape[1]).any():
        bad.append("remainder indices not ascending within a row or out of range")
    want = np.uint8 if shape[1] <= 256 else np.uint16 if shape[1] <= 65536 else np.int32
    if r["indices"].dtype != want:
        bad.append(f"remainder indices are {r['indices'].dtype}, the narrowest type is {np.dtype(want)}")
    c, rs = int(g.attrs["in_c"]), int(np.prod(g.attrs["k"]))
    cols = (idx % c) * rs + idx // c  # KRSC -> (c, r, s)
    if set(zip(rows.tolist(), cols.tolist())) & set(zip(brows.tolist(), bidx.tolist())):
        bad.append("a single weight lies inside a kept block")
    return bad, rows, cols


def check_hybrid_stored(g, model, name, raw, brows, bidx, srows, sidx):
    """Problems of a hybrid layer's entries: the blocks are whole kept blocks of
    the mask, and blocks plus singles hold exactly the model's non-zeros."""
    key = f"masks/{name}.weight"
    mask = model[key][()].reshape(raw.shape) if key in model else np.ones(raw.shape)
    if not mask[brows, bidx].all() or not mask[srows, sidx].all():
        return ["a stored entry is not a kept weight"]
    if np.count_nonzero(raw[srows, sidx]) != len(sidx) or \
            np.count_nonzero(raw[brows, bidx]) + len(sidx) != np.count_nonzero(raw):
        return ["blocks and singles do not hold exactly the model's non-zeros"]
    return []


def check_layer(g, model, layers, i, tol, reader, dec):
    """List of problems of one layer group (empty when it is right)."""
    bad = []
    read_layer, dense_weights = reader
    shape = tuple(int(v) for v in g.attrs["shape"])
    enc = text(g.attrs["encoding-type"])
    if enc not in ("csr_matrix", "bsr_matrix") or text(g.attrs["encoding-version"]) != "0.1.0":
        bad.append("neither an anndata csr_matrix nor a bsr_matrix")
    m, b = read_layer(g)  # the documented reader
    hybrid = enc == "bsr_matrix" and "remainder" in g
    if enc == "bsr_matrix" and not hybrid and (m.format != "bsr" or m.blocksize != block_size(g)):
        bad.append("scipy did not read a BSR matrix of the stored block size")
    want, bias, bn, scale = dense_folded(model, layers, i)
    if want.shape != shape:
        return [f"shape {shape}, model {want.shape}"]
    got = dense_weights(g, m).reshape(shape).astype(np.float64)
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30) if want.size else 0.0
    if err > tol:
        bad.append(f"scipy CSR differs from the folded weights (rel err {err:.3g} > {tol})")
    if (text(g.attrs["bn"]) or None) != bn:
        bad.append(f"folded BN {text(g.attrs['bn'])!r}, the description says {bn!r}")
    if np.abs(b - bias).max(initial=0) > 1e-5 * max(1.0, np.abs(bias).max(initial=0)):
        bad.append("bias differs from the folded bias")
    ptr, idx = g["indptr"][()], g["indices"][()].astype(np.int64)
    more, (rows, idx) = check_index(g, shape, ptr, idx)
    bad += more
    raw = model[f"params/{layers[i]['name']}.weight"][()].reshape(shape[0], -1)
    if hybrid:
        more, srows, sidx = check_remainder(g, shape, rows, idx)
        bad += more
        bad += check_hybrid_stored(g, model, layers[i]["name"], raw, rows, idx, srows, sidx)
    else:
        bad += check_stored(g, model, layers[i]["name"], raw, rows, idx)
    if dec is not None:
        dw, db = dec.get(layers[i]["name"], (None, None))
        if dw is None or not np.array_equal(dw, dense_weights(g, m).reshape(shape)) or not np.array_equal(db, b):
            bad.append("the documented reader differs from the toolkit's decode")
    if text(g.attrs["values"]) == "codebook4":
        code = layer_codes(g, len(idx))
        if (code >= len(g["codebook"])).any():
            bad.append("codes beyond the codebook")
        bad += check_quant(g, model, layers[i]["name"], rows, idx, code, scale, bn)
    return bad


def main():
    if len(sys.argv) not in (3, 4):
        print(f"usage: {NAME} EXPORT MODEL [DECODED]", file=sys.stderr)
        sys.exit(2)
    passed = failed = 0
    reader = doc_reader()
    dec = decoded(sys.argv[3]) if len(sys.argv) == 4 else None
    with h5py.File(sys.argv[1], "r") as ex, h5py.File(sys.argv[2], "r") as model:
        layers = parse_desc(model["net/description"].asstr()[()])
        vt = text(ex.attrs["values"])
        convs = [i for i, l in enumerate(layers) if l["kind"] in ("conv", "linear")]
        if text(ex.attrs["format"]) != "sparsecnn-export" or sorted(ex["layers"]) != sorted(layers[i]["name"] for i in convs):
            print("FAIL file: not an export of this model's layers")
            failed += 1
        nbsr = sum(text(g.attrs["encoding-type"]) == "bsr_matrix" for g in ex["layers"].values())
        nhyb = sum("remainder" in g for g in ex["layers"].values())
        if int(ex.attrs["format_version"]) != (4 if nhyb else 3 if nbsr else 2):
            print(f"FAIL file: format_version {int(ex.attrs['format_version'])} with {nbsr} BSR layers")
            failed += 1
        for i in convs:
            name = layers[i]["name"]
            g = ex[f"layers/{name}"]
            tol = 1e-6 if text(g.attrs["values"]) == "fp32" else 1e-3
            bad = check_layer(g, model, layers, i, tol, reader, dec)
            if bad:
                print(f"FAIL {name}: " + "; ".join(bad))
                failed += 1
            else:
                enc = "bsr %dx%d" % block_size(g) if text(g.attrs["encoding-type"]) == "bsr_matrix" else "csr"
                enc += " + %d singles" % int(g["remainder"].attrs["nnz"]) if "remainder" in g else ""
                print(f"ok   {name} ({enc}, {text(g.attrs['values'])}, nnz {int(g.attrs['nnz'])}{', = toolkit decode' if dec else ''})")
                passed += 1
        print(f"  {sys.argv[1]}: values {vt}, {len(convs)} layers, {nbsr} BSR")
    summary(passed, failed, 0)


if __name__ == "__main__":
    main()
