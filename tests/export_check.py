#!/usr/bin/python3
"""Checks an export file against the model it was exported from, with h5py
and scipy only (Debian's python3-h5py and python3-scipy).

    /usr/bin/python3 tests/export_check.py EXPORT.csr.h5 MODEL.h5

For every /layers/<name> group: reads it as a scipy CSR matrix in the
anndata convention and compares it with the dense BN-folded weights computed
here from the model's /params and /buffers (the BN to fold is found from the
network description, independently of the export); checks uniform rows,
ascending indices, offsets from the layer's geometry, the folded bias, the
real non-zero count, and for codebook layers that codes, padding mask,
codebook and row scales decode to the same matrix; when the model has
quantize's /quant, that codebook layers carry its codebook and indices, and
with row scales (quantize --row-scale) row_scale = quantize's scale times
the BN scale, the decoded fp32 values being the model's weights bit for bit
where no BN is folded. Prints ok/FAIL lines and
"export_check.py: N passed, N failed, N skipped"; without h5py/scipy the
check is skipped.
"""
import sys

NAME = "export_check.py"


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


def offsets_of(g, idx):
    """Offsets into the zero-padded input for column indices idx."""
    if g.attrs["kind"] == "linear":
        return idx
    r, s = (int(v) for v in g.attrs["k"])
    pad, h, w = int(g.attrs["pad"]), int(g.attrs["in_h"]), int(g.attrs["in_w"])
    c, rs = idx // (r * s), idx % (r * s)
    return (c * (h + 2 * pad) + rs // s) * (w + 2 * pad) + rs % s


def decode_codes(g, n):
    """Values of a codebook layer from codes, pad_mask, codebook, row_scale."""
    codes = g["codes"][()]
    code = np.empty(2 * len(codes), np.int64)
    code[0::2], code[1::2] = codes & 15, codes >> 4
    pad = np.unpackbits(g["pad_mask"][()], bitorder="little")[:n].astype(bool)
    cb = g["codebook"][()].astype(np.float64)
    k = int(g.attrs["shape"][0])
    row = np.repeat(np.arange(k), n // k) if k else np.zeros(0, np.int64)
    v = cb[np.minimum(code[:n], len(cb) - 1)] * g["row_scale"][()].astype(np.float64)[row]
    return np.where(pad, 0.0, v), pad, code[:n]


def check_quant(g, model, name, idx, pad, code, scale, bn):
    """Problems of a codebook layer against quantize's /quant/<name>.weight."""
    key = f"quant/{name}.weight"
    if "quant" not in model or key not in model or "codebook" not in model[key]:
        return []
    q, bad = model[key], []
    k = int(g.attrs["shape"][0])
    rows = np.repeat(np.arange(k), len(idx) // k) if k else np.zeros(0, np.int64)
    cb = q["codebook"][()].astype(np.float32)
    if not np.array_equal(g["codebook"][()].astype(np.float32), cb):
        bad.append("codebook is not quantize's")
    qidx = q["indices"][()].reshape(k, -1)
    if not np.array_equal(code[~pad], qidx[rows, idx][~pad]):
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
        if not np.array_equal(rs, qs) or not np.array_equal(dec[~pad], w[rows, idx][~pad]):
            bad.append("decoded values are not the quantized weights bit for bit")
    return bad


def check_layer(g, model, layers, i, tol):
    """List of problems of one layer group (empty when it is right)."""
    bad = []
    shape = tuple(int(v) for v in g.attrs["shape"])
    if g.attrs["encoding-type"] != "csr_matrix" or g.attrs["encoding-version"] != "0.1.0":
        bad.append("not an anndata csr_matrix")
    # the one-liner a user writes:
    m = sp.csr_matrix((g["data"][()].astype(np.float64), g["indices"][()], g["indptr"][()]), shape=shape)
    want, bias, bn, scale = dense_folded(model, layers, i)
    if want.shape != shape:
        return [f"shape {shape}, model {want.shape}"]
    err = np.abs(m.toarray() - want).max() / max(np.abs(want).max(), 1e-30) if want.size else 0.0
    if err > tol:
        bad.append(f"scipy CSR differs from the folded weights (rel err {err:.3g} > {tol})")
    if (g.attrs["bn"] or None) != bn:
        bad.append(f"folded BN {g.attrs['bn']!r}, the description says {bn!r}")
    if np.abs(g["bias"][()] - bias).max(initial=0) > 1e-5 * max(1.0, np.abs(bias).max(initial=0)):
        bad.append("bias differs from the folded bias")
    ptr, idx, nr = g["indptr"][()], g["indices"][()], int(g.attrs["nnz_row"])
    if not np.array_equal(ptr, np.arange(shape[0] + 1) * nr):
        bad.append("rows are not all nnz_row long")
    rows = idx.reshape(shape[0], nr)
    if nr > 1 and not (np.diff(rows, axis=1) > 0).all():
        bad.append("indices not ascending within a row")
    if not np.array_equal(g["offsets"][()], offsets_of(g, idx)):
        bad.append("offsets do not match the geometry")
    raw = model[f"params/{layers[i]['name']}.weight"][()].reshape(shape[0], -1)
    if int(g.attrs["nnz"]) != np.count_nonzero(raw) or \
            np.count_nonzero(raw[np.repeat(np.arange(shape[0]), nr), idx]) != np.count_nonzero(raw):
        bad.append("the rows do not hold exactly the model's non-zeros")
    if g.attrs["values"] == "codebook4":
        v, pad, code = decode_codes(g, len(idx))
        dense = sp.csr_matrix((v, idx, ptr), shape=shape).toarray()
        cerr = np.abs(dense - want).max() / max(np.abs(want).max(), 1e-30)
        if cerr > 1e-6 or (~pad).sum() != int(g.attrs["nnz"]) or (code[~pad] >= len(g["codebook"])).any():
            bad.append(f"codes decode to other weights (rel err {cerr:.3g})")
        bad += check_quant(g, model, layers[i]["name"], idx, pad, code, scale, bn)
    return bad


def main():
    if len(sys.argv) != 3:
        print(f"usage: {NAME} EXPORT MODEL", file=sys.stderr)
        sys.exit(2)
    passed = failed = 0
    with h5py.File(sys.argv[1], "r") as ex, h5py.File(sys.argv[2], "r") as model:
        layers = parse_desc(model["net/description"].asstr()[()])
        vt = ex.attrs["values"]
        convs = [i for i, l in enumerate(layers) if l["kind"] in ("conv", "linear")]
        if ex.attrs["format"] != "sparsecnn-export" or sorted(ex["layers"]) != sorted(layers[i]["name"] for i in convs):
            print("FAIL file: not an export of this model's layers")
            failed += 1
        for i in convs:
            name = layers[i]["name"]
            g = ex[f"layers/{name}"]
            tol = 1e-6 if g.attrs["values"] == "fp32" else 1e-3
            bad = check_layer(g, model, layers, i, tol)
            if bad:
                print(f"FAIL {name}: " + "; ".join(bad))
                failed += 1
            else:
                print(f"ok   {name} ({g.attrs['values']}, nnz {int(g.attrs['nnz'])}, nnz_row {int(g.attrs['nnz_row'])})")
                passed += 1
        print(f"  {sys.argv[1]}: values {vt}, {len(convs)} layers")
    summary(passed, failed, 0)


if __name__ == "__main__":
    main()
