#!/usr/bin/env python3
"""PyTorch's dense network with the same weights as a sparsecnn export.

Loads an export (model.csr.h5: the network description and every conv and
linear layer as a BN-folded CSR matrix), rebuilds the network in PyTorch
with dense weights, and times it the ways a user would run it on this GPU:
eager + CUDA graph with BN folded and channels_last, in fp16 and bf16, and
torch.compile(mode="max-autotune") with --compile (about two minutes
per shape on an H100), at batch 128 and batch 1 (--no-batch1: batch 128
only). It also prints
the test top-1 of each precision, so one device call shows deploy's dense
engine and PyTorch side by side on the same weights.

Timing: the input is already normalised and on the GPU in the model's
layout and precision (deploy's engine times the normalisation from bytes
too, so this favours PyTorch slightly); 10 warm-up runs, then the median of
--repeat replays timed with CUDA events. The --json file is rewritten after
each export, so a run cut short keeps the exports it finished.

Usage: bench/dense_pytorch.py EXPORT.h5 [EXPORT.h5 ...] [--data DIR]
       [--batch 128] [--no-batch1] [--repeat 50] [--compile] [--json FILE]
"""
import argparse
import copy
import json
import os
import sys
import time

import h5py
import numpy as np
import torch
import torch.nn.functional as F


# --- the export ---------------------------------------------------------------------

def parse_description(text):
    """Layers of a network description: dicts with kind, args, name, src, src2."""
    layers, names = [], {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        kind, args, opts = words[0], [], {}
        for w in words[1:]:
            if "=" in w:
                k, v = w.split("=", 1)
                opts[k] = v
            else:
                args.append(w)
        i = len(layers)
        name = opts.get("name", "%s%d" % (kind, i))
        src = names[opts["from"]] if "from" in opts else i - 1
        src2 = names[args[0]] if kind == "add" else None
        layers.append(dict(kind=kind, args=args, opts=opts, name=name, src=src, src2=src2))
        names[name] = i
    return layers


def decode_layer(g):
    """Dense BN-folded weights (K, C, R, S) and bias of one export layer group."""
    K, cols = (int(x) for x in g.attrs["shape"])
    if "data" in g:
        data = g["data"][()].astype(np.float32)
        indices = g["indices"][()].astype(np.int64)
        indptr = g["indptr"][()].astype(np.int64)
    else:
        raise SystemExit("dense_pytorch: layer %s has no 'data' (export it unquantized)" % g.name)
    r, s = (int(x) for x in g.attrs["k"])
    c = int(g.attrs["in_c"])
    kind = g.attrs["kind"]
    kind = kind.decode() if isinstance(kind, bytes) else kind
    if "blocksize" in g.attrs:
        dense = bsr_to_dense(K, cols, g.attrs["blocksize"], data, indices, indptr)
        if kind != "linear":  # BSR columns run (r, s, c): KRSC to KCRS
            dense = dense.reshape(K, r, s, c).transpose(0, 3, 1, 2).reshape(K, cols)
    else:
        dense = np.zeros((K, cols), np.float32)
        rows = np.repeat(np.arange(K), np.diff(indptr))
        np.add.at(dense, (rows, indices), data)
    if kind == "linear":
        return dense, g["bias"][()].astype(np.float32), "linear"
    return dense.reshape(K, c, r, s), g["bias"][()].astype(np.float32), "conv"


def bsr_to_dense(K, cols, blocksize, data, indices, indptr):
    """Dense (K, cols) matrix of a scipy-convention BSR layer (blocks kb x cb)."""
    kb, cb = (int(x) for x in blocksize)
    dense = np.zeros((K // kb, kb, cols // cb, cb), np.float32)
    brow = np.repeat(np.arange(K // kb), np.diff(indptr))
    dense[brow, :, indices, :] = data.reshape(-1, kb, cb)
    return dense.reshape(K, cols)


def attr_str(v):
    return v.decode() if isinstance(v, bytes) else str(v)


class ExportNet(torch.nn.Module):
    """The export's graph: convs and linears with folded weights; folded BNs skipped."""

    def __init__(self, path):
        super().__init__()
        with h5py.File(path, "r") as f:
            desc = attr_str(f["net/description"][()])
            self.layers = parse_description(desc)
            self.mean = torch.tensor(f["net/input_mean"][()], dtype=torch.float32)
            self.std = torch.tensor(f["net/input_std"][()], dtype=torch.float32)
            self.classes = int(f.attrs["classes"])
            self.arch = attr_str(f.attrs["arch"])
            self.dataset = attr_str(f.attrs["dataset"])
            folded = set()
            self.params = torch.nn.ParameterDict()
            for name, g in f["layers"].items():
                w, b, kind = decode_layer(g)
                key = name.replace(".", "_")
                self.params[key + "_w"] = torch.nn.Parameter(torch.from_numpy(w), requires_grad=False)
                self.params[key + "_b"] = torch.nn.Parameter(torch.from_numpy(b), requires_grad=False)
                if attr_str(g.attrs["bn"]):
                    folded.add(attr_str(g.attrs["bn"]))
            if len(f.get("params", {})):
                raise SystemExit("dense_pytorch: %s has unfolded batch norms (not supported)" % path)
        self.folded = folded

    def run_layer(self, L, x, outs):
        kind, a, o = L["kind"], L["args"], L["opts"]
        key = L["name"].replace(".", "_")
        if kind == "conv":
            return F.conv2d(x, self.params[key + "_w"], self.params[key + "_b"],
                            stride=int(o.get("stride", 1)), padding=int(o.get("pad", 0)))
        if kind == "linear":
            return F.linear(torch.flatten(x, 1), self.params[key + "_w"], self.params[key + "_b"])
        if kind == "bn":
            if L["name"] in self.folded:
                return x
            raise SystemExit("dense_pytorch: batch norm %s is not folded" % L["name"])
        if kind == "relu":
            return F.relu(x)
        if kind == "add":
            return x + outs[L["src2"]]
        if kind in ("maxpool", "avgpool"):
            k = int(a[0])
            st, pd = int(o.get("stride", k)), int(o.get("pad", 0))
            if kind == "maxpool":
                return F.max_pool2d(x, k, st, pd)
            return F.avg_pool2d(x, k, st, pd, count_include_pad=True)
        if kind == "gap":
            return F.adaptive_avg_pool2d(x, 1)
        raise SystemExit("dense_pytorch: layer kind %s not supported" % kind)

    def forward(self, x):
        outs = [None] * len(self.layers)
        for i, L in enumerate(self.layers):
            src = x if L["src"] < 0 else outs[L["src"]]
            outs[i] = self.run_layer(L, src, outs)
        return outs[-1].reshape(x.shape[0], -1)


# --- data, accuracy, timing ------------------------------------------------------------

def load_test(data_dir, classes):
    """Test images (n, 3, 32, 32) uint8 and labels from the official binary layout."""
    for name, rec, lab in (("test.bin", 3074, 1), ("test_batch.bin", 3073, 0)):
        p = os.path.join(data_dir, name)
        if os.path.exists(p):
            raw = np.fromfile(p, np.uint8).reshape(-1, rec)
            return raw[:, rec - 3072:].reshape(-1, 3, 32, 32), raw[:, lab].astype(np.int64)
    raise SystemExit("dense_pytorch: no test.bin or test_batch.bin in %s" % data_dir)


def normalise(net, img, dtype):
    x = torch.from_numpy(img).cuda().float() / 255.0
    x = (x - net.mean.cuda().view(1, 3, 1, 1)) / net.std.cuda().view(1, 3, 1, 1)
    return x.to(dtype).contiguous(memory_format=torch.channels_last)


def accuracy(net, images, labels, dtype, batch=500):
    hits = 0
    with torch.no_grad():
        for i in range(0, len(images), batch):
            y = net(normalise(net, images[i:i + batch], dtype)).float().argmax(1).cpu().numpy()
            hits += int((y == labels[i:i + batch]).sum())
    return 100.0 * hits / len(images)


def median_ms(fn, repeat):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return float(np.median(times))


def graph_ms(model, x, repeat):
    """Median ms of CUDA graph replays of model(x)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(s):
        for _ in range(3):
            model(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        model(x)
    return median_ms(g.replay, repeat)


def compiled_ms(model, x, repeat):
    """Median ms of torch.compile(mode="max-autotune") (CUDA graphs inside)."""
    torch._dynamo.reset()
    cm = torch.compile(model, mode="max-autotune")
    with torch.no_grad():
        t0 = time.time()
        for _ in range(3):
            cm(x)
        torch.cuda.synchronize()
        print("  (compiled in %.0f s)" % (time.time() - t0), flush=True)
        return median_ms(lambda: cm(x), repeat)


# --- main --------------------------------------------------------------------------------

def run_one(path, args):
    net = ExportNet(path).eval()
    images, labels = load_test(args.data, net.classes)
    rows = []
    for dname, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        model = copy.deepcopy(net).cuda().to(dtype).to(memory_format=torch.channels_last)
        acc = accuracy(model, images, labels, dtype)
        for b in (args.batch,) if args.no_batch1 else (args.batch, 1):
            x = normalise(net, images[:b], dtype)
            row = dict(model=net.arch, precision=dname, batch=b, test_accuracy=acc,
                       graph_ms=graph_ms(model, x, args.repeat))
            if args.compile and dname == "fp16":
                row["compile_ms"] = compiled_ms(model, x, args.repeat)
            rows.append(row)
            print("%s %s batch %d: BN-folded channels_last CUDA graph %.3f ms%s; test top-1 %.2f%%" % (
                net.arch, dname, b, row["graph_ms"],
                ", torch.compile max-autotune %.3f ms" % row["compile_ms"] if "compile_ms" in row else "",
                acc), flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("exports", nargs="+")
    ap.add_argument("--data", default="data/cifar-100-binary")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--no-batch1", action="store_true", help="time only --batch, not batch 1 as well")
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--compile", action="store_true", help="also time torch.compile(mode=max-autotune) in fp16")
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    print("dense_pytorch: torch %s, %s" % (torch.__version__, torch.cuda.get_device_name()), flush=True)
    rows = []
    for p in args.exports:
        rows += run_one(p, args)
        if args.json:
            write_json(args.json, rows)


def write_json(path, rows):
    """Writes the rows so far to path through a temporary file (a cut-short run leaves a whole file)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
