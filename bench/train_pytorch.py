#!/usr/bin/env python3
"""PyTorch reference for `train`: the same architectures (resnet18 CIFAR variant with
1x1-conv shortcuts, vgg16 with batch norm and one linear head), the same recipe
(batch 512, SGD Nesterov 0.9, weight decay 5e-4 on all parameters, one-cycle with 25%
warm-up from lr/25 and decay to lr/25e4 (cosine, or linear), label smoothing 0.1, random crop
from a 4-pixel reflect-padded image + horizontal flip) and the same split (5,000 seeded
validation images held out of the 50,000 training images), with PyTorch's usual fast
settings: cudnn.benchmark, channels_last, autocast (bf16 or fp16), data resident on the
GPU. Prints one line per epoch and a final JSON line with seconds per epoch and accuracy.

usage: train_pytorch.py --model resnet18|vgg16 --epochs 30 --data data/cifar-100-binary
"""
import argparse, json, time
import numpy as np
import torch, torch.nn as nn, torch.nn.functional as F


def read_cifar100(path):
    raw = np.fromfile(path, dtype=np.uint8).reshape(-1, 3074)
    return raw[:, 2:].reshape(-1, 3, 32, 32), raw[:, 1].astype(np.int64)


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False); self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False); self.b2 = nn.BatchNorm2d(cout)
        self.sc = None
        if stride != 1 or cin != cout:
            self.sc = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (x if self.sc is None else self.sc(x)))


class ResNet18(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        layers, cin = [], 64
        for i, w in enumerate([64, 128, 256, 512]):
            for j in range(2):
                layers.append(Block(cin, w, 2 if (j == 0 and i > 0) else 1)); cin = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def vgg16(classes):
    cfg = [64, 64, 'M', 128, 128, 'M', 256, 256, 256, 'M', 512, 512, 512, 'M', 512, 512, 512, 'M']
    mods, cin = [], 3
    for v in cfg:
        if v == 'M':
            mods.append(nn.MaxPool2d(2))
        else:
            mods += [nn.Conv2d(cin, v, 3, 1, 1, bias=False), nn.BatchNorm2d(v), nn.ReLU()]; cin = v
    return nn.Sequential(*mods, nn.Flatten(), nn.Linear(512, classes))


def augment(x, gen):
    n = x.shape[0]
    xp = F.pad(x, (4, 4, 4, 4), mode='reflect')
    dx = torch.randint(0, 9, (n,), device=x.device, generator=gen)
    dy = torch.randint(0, 9, (n,), device=x.device, generator=gen)
    idx = torch.arange(32, device=x.device)
    rows = (dy[:, None] + idx[None, :])[:, None, :, None].expand(n, 3, 32, 40)
    xp = torch.gather(xp, 2, rows)
    cols = (dx[:, None] + idx[None, :])[:, None, None, :].expand(n, 3, 32, 32)
    xp = torch.gather(xp, 3, cols)
    flip = torch.rand(n, device=x.device, generator=gen) < 0.5
    return torch.where(flip[:, None, None, None], xp.flip(3), xp)


def evaluate(model, x, y, mean, std, bs, dtype):
    model.eval(); correct = 0
    with torch.no_grad(), torch.autocast('cuda', dtype=dtype):
        for i in range(0, x.shape[0], bs):
            xb = ((x[i:i + bs].float() / 255 - mean) / std).contiguous(memory_format=torch.channels_last)
            correct += (model(xb).argmax(1) == y[i:i + bs]).sum().item()
    model.train()
    return 100.0 * correct / x.shape[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--model', default='resnet18'); ap.add_argument('--epochs', type=int, default=30)
    ap.add_argument('--batch', type=int, default=512); ap.add_argument('--lr', type=float, default=None)
    ap.add_argument('--data', default='data/cifar-100-binary'); ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--dtype', default='bf16', choices=['bf16', 'fp16'])
    ap.add_argument('--val', type=int, default=5000, help='validation images held out (0: train on all)')
    ap.add_argument('--anneal', default='cos', choices=['cos', 'linear'])
    a = ap.parse_args()
    torch.manual_seed(a.seed); torch.backends.cudnn.benchmark = True
    dev = 'cuda'; dtype = torch.bfloat16 if a.dtype == 'bf16' else torch.float16
    xtr, ytr = read_cifar100(f'{a.data}/train.bin'); xte, yte = read_cifar100(f'{a.data}/test.bin')
    perm = np.random.default_rng(a.seed).permutation(len(xtr))
    val, tr = perm[:a.val], np.sort(perm[a.val:])
    xv, yv = torch.tensor(xtr[val], device=dev), torch.tensor(ytr[val], device=dev)
    xt, yt = torch.tensor(xtr[tr], device=dev), torch.tensor(ytr[tr], device=dev)
    xe, ye = torch.tensor(xte, device=dev), torch.tensor(yte, device=dev)
    mean = (xt.float() / 255).mean((0, 2, 3)).view(1, 3, 1, 1); std = (xt.float() / 255).std((0, 2, 3)).view(1, 3, 1, 1)
    model = (ResNet18(100) if a.model == 'resnet18' else vgg16(100)).to(dev).to(memory_format=torch.channels_last)
    lr = a.lr or 0.4
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
    steps = a.epochs * (xt.shape[0] // a.batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, lr, total_steps=steps, pct_start=0.25,
                                                anneal_strategy=a.anneal, three_phase=False, cycle_momentum=False)
    lossf = nn.CrossEntropyLoss(label_smoothing=0.1); gen = torch.Generator(device=dev); gen.manual_seed(a.seed)
    epoch_times = []
    for ep in range(a.epochs):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        order = torch.randperm(xt.shape[0], device=dev, generator=gen)
        for i in range(xt.shape[0] // a.batch):
            idx = order[i * a.batch:(i + 1) * a.batch]
            xb = ((augment(xt[idx], gen).float() / 255 - mean) / std).contiguous(memory_format=torch.channels_last)
            with torch.autocast('cuda', dtype=dtype):
                loss = lossf(model(xb), yt[idx])
            opt.zero_grad(set_to_none=True); loss.backward(); opt.step(); sched.step()
        torch.cuda.synchronize(); epoch_times.append(time.perf_counter() - t0)
        va = evaluate(model, xv, yv, mean, std, 1000, dtype) if a.val else float('nan')
        print(f'epoch {ep + 1}/{a.epochs} loss {loss.item():.3f} val {va:.2f}% {epoch_times[-1]:.2f}s', flush=True)
    te = evaluate(model, xe, ye, mean, std, 1000, dtype)
    train_s = sum(epoch_times)
    print(json.dumps({'tool': 'train_pytorch', 'model': a.model, 'epochs': a.epochs, 'dtype': a.dtype,
                      'train_seconds': round(train_s, 2), 'seconds_per_epoch_median': round(float(np.median(epoch_times)), 3),
                      'first_epoch_seconds': round(epoch_times[0], 2), 'val_accuracy': va, 'test_accuracy': te}))


if __name__ == '__main__':
    main()
