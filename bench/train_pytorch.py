#!/usr/bin/env python3
"""PyTorch reference for `train`: the same architectures as runtime/net_arch.c (resnet18 and
resnet50 CIFAR variants: 3x3 stem, no max-pool, 1x1-conv + BN shortcuts where the shape
changes; resnet50 with bottlenecks [3,4,6,3], expansion 4, the stride on the 3x3;
densenet121 (DenseNet-BC, growth 32, blocks [6,12,24,16], 3x3 stem of 64, BN-ReLU-conv 1x1
(128)-BN-ReLU-conv 3x3 (32) concatenated before the input, transitions BN-ReLU-conv 1x1 to
half the channels + 2x2 average pool, BN-ReLU-GAP-linear head); vgg16/vgg19 with batch norm
and one linear head), the same recipe (batch 512, SGD Nesterov 0.9, weight decay 5e-4 on all
parameters, peak lr as train's auto (0.4 for resnet, vgg and densenet, 0.05 otherwise), one-cycle with
25% warm-up from lr/25 and decay to lr/25e4 (cosine, or linear), label smoothing 0.1, random
crop from a 4-pixel reflect-padded image + horizontal flip, conv weights drawn as train draws
them: Kaiming normal over fan-out (He et al., "Delving Deep into Rectifiers", ICCV 2015), the
init of torchvision's ResNets; --init torch keeps PyTorch's own default, Kaiming uniform
with a = sqrt(5), whose weights are 2-5x smaller, which with batch norm after every conv acts
as a several times larger learning rate) and the same split (5,000 seeded
validation images held out of the 50,000 training images), with PyTorch's usual fast
settings: cudnn.benchmark, channels_last, autocast (bf16, or fp16 with a gradient scaler),
data resident on the GPU. Prints the parameter count, one line per epoch and a final JSON
line with seconds per epoch and accuracy. --params: print the parameter count and exit
(no GPU needed).

usage: train_pytorch.py --model resnet18|resnet50|densenet121|vgg16|vgg19 --epochs 30
                        --data data/cifar-100-binary
"""
import argparse, json, os, time
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


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 with the stride, 1x1 expand to 4x the width; 1x1 conv + BN shortcut
    when the shape changes (runtime/net_arch.c's resnet_bottleneck)."""
    def __init__(self, cin, width, stride):
        super().__init__()
        cout = 4 * width
        self.c1 = nn.Conv2d(cin, width, 1, bias=False); self.b1 = nn.BatchNorm2d(width)
        self.c2 = nn.Conv2d(width, width, 3, stride, 1, bias=False); self.b2 = nn.BatchNorm2d(width)
        self.c3 = nn.Conv2d(width, cout, 1, bias=False); self.b3 = nn.BatchNorm2d(cout)
        self.sc = None
        if stride != 1 or cin != cout:
            self.sc = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = F.relu(self.b2(self.c2(y)))
        y = self.b3(self.c3(y))
        return F.relu(y + (x if self.sc is None else self.sc(x)))


class ResNet50(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        layers, cin = [], 64
        for i, (w, n) in enumerate(zip([64, 128, 256, 512], [3, 4, 6, 3])):
            for j in range(n):
                layers.append(Bottleneck(cin, w, 2 if (j == 0 and i > 0) else 1)); cin = 4 * w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class DenseLayer(nn.Module):
    """BN-ReLU-conv 1x1 (4*growth), BN-ReLU-conv 3x3 (growth); the output is the new
    features concatenated before the input (runtime/net_arch.c's arch_densenet)."""
    def __init__(self, cin, growth):
        super().__init__()
        self.b1 = nn.BatchNorm2d(cin); self.c1 = nn.Conv2d(cin, 4 * growth, 1, bias=False)
        self.b2 = nn.BatchNorm2d(4 * growth); self.c2 = nn.Conv2d(4 * growth, growth, 3, 1, 1, bias=False)

    def forward(self, x):
        y = self.c1(F.relu(self.b1(x)))
        y = self.c2(F.relu(self.b2(y)))
        return torch.cat([y, x], 1)


class DenseNet121(nn.Module):
    def __init__(self, classes, growth=32, blocks=(6, 12, 24, 16)):
        super().__init__()
        ch = 2 * growth
        mods = [nn.Conv2d(3, ch, 3, 1, 1, bias=False)]
        for d, n in enumerate(blocks):
            for _ in range(n):
                mods.append(DenseLayer(ch, growth)); ch += growth
            if d == len(blocks) - 1:
                break
            mods += [nn.BatchNorm2d(ch), nn.ReLU(), nn.Conv2d(ch, ch // 2, 1, bias=False), nn.AvgPool2d(2)]
            ch //= 2
        mods += [nn.BatchNorm2d(ch), nn.ReLU()]
        self.features = nn.Sequential(*mods)
        self.fc = nn.Linear(ch, classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


VGG_CFG = {'vgg16': [64, 64, 'M', 128, 128, 'M', 256, 256, 256, 'M', 512, 512, 512, 'M', 512, 512, 512, 'M'],
           'vgg19': [64, 64, 'M', 128, 128, 'M', 256, 256, 256, 256, 'M', 512, 512, 512, 512, 'M',
                     512, 512, 512, 512, 'M']}


def vgg(name, classes):
    mods, cin = [], 3
    cfg = VGG_CFG[name]
    for v in cfg:
        if v == 'M':
            mods.append(nn.MaxPool2d(2))
        else:
            mods += [nn.Conv2d(cin, v, 3, 1, 1, bias=False), nn.BatchNorm2d(v), nn.ReLU()]; cin = v
    return nn.Sequential(*mods, nn.Flatten(), nn.Linear(512, classes))


MODELS = {'resnet18': ResNet18, 'resnet50': ResNet50, 'densenet121': DenseNet121,
          'vgg16': lambda c: vgg('vgg16', c), 'vgg19': lambda c: vgg('vgg19', c)}


def auto_lr(model):
    """train's --lr auto: 0.4 for resnet, vgg and densenet, 0.05 otherwise."""
    return 0.4 if ('resnet' in model or 'vgg' in model or 'densenet' in model) else 0.05


def count_params(model):
    return sum(p.numel() for p in model.parameters())


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
    ap.add_argument('--model', default='resnet18', choices=sorted(MODELS)); ap.add_argument('--epochs', type=int, default=30)
    ap.add_argument('--batch', type=int, default=512); ap.add_argument('--lr', type=float, default=None)
    ap.add_argument('--data', default='data/cifar-100-binary'); ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--dtype', default='bf16', choices=['bf16', 'fp16'])
    ap.add_argument('--val', type=int, default=5000, help='validation images held out (0: train on all)')
    ap.add_argument('--anneal', default='cos', choices=['cos', 'linear'])
    ap.add_argument('--classes', type=int, default=100)
    ap.add_argument('--params', action='store_true', help='print the parameter count and exit')
    ap.add_argument('--init', default='train', choices=['train', 'torch'],
                    help="conv weights: train's Kaiming normal over fan-out (default), or PyTorch's default")
    ap.add_argument('--ckpt', default=None, help='checkpoint file: written after every epoch, resumed from when present')
    a = ap.parse_args()
    if a.params:
        print(json.dumps({'model': a.model, 'classes': a.classes, 'parameters': count_params(MODELS[a.model](a.classes))}))
        return
    torch.manual_seed(a.seed); torch.backends.cudnn.benchmark = True
    dev = 'cuda'; dtype = torch.bfloat16 if a.dtype == 'bf16' else torch.float16
    xtr, ytr = read_cifar100(f'{a.data}/train.bin'); xte, yte = read_cifar100(f'{a.data}/test.bin')
    perm = np.random.default_rng(a.seed).permutation(len(xtr))
    val, tr = perm[:a.val], np.sort(perm[a.val:])
    xv, yv = torch.tensor(xtr[val], device=dev), torch.tensor(ytr[val], device=dev)
    xt, yt = torch.tensor(xtr[tr], device=dev), torch.tensor(ytr[tr], device=dev)
    xe, ye = torch.tensor(xte, device=dev), torch.tensor(yte, device=dev)
    mean = (xt.float() / 255).mean((0, 2, 3)).view(1, 3, 1, 1); std = (xt.float() / 255).std((0, 2, 3)).view(1, 3, 1, 1)
    model = MODELS[a.model](a.classes)
    if a.init == 'train':
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
    model = model.to(dev).to(memory_format=torch.channels_last)
    nparams = count_params(model)
    print(f'{a.model}: {nparams} parameters', flush=True)
    lr = a.lr or auto_lr(a.model)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
    steps = a.epochs * (xt.shape[0] // a.batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, lr, total_steps=steps, pct_start=0.25,
                                                anneal_strategy=a.anneal, three_phase=False, cycle_momentum=False)
    scaler = torch.cuda.amp.GradScaler(enabled=dtype == torch.float16)  # fp16: dynamic loss scaling as train's
    lossf = nn.CrossEntropyLoss(label_smoothing=0.1); gen = torch.Generator(device=dev); gen.manual_seed(a.seed)
    epoch_times, start, va = [], 0, float('nan')
    if a.ckpt and os.path.exists(a.ckpt):
        ck = torch.load(a.ckpt, map_location=dev, weights_only=False)
        model.load_state_dict(ck['model']); opt.load_state_dict(ck['opt']); sched.load_state_dict(ck['sched'])
        scaler.load_state_dict(ck['scaler']); gen.set_state(ck['gen'].cpu())
        start, epoch_times, va = ck['epoch'], ck['epoch_times'], ck['val']
        print(f'resumed {a.ckpt} after epoch {start}', flush=True)
    for ep in range(start, a.epochs):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        order = torch.randperm(xt.shape[0], device=dev, generator=gen)
        for i in range(xt.shape[0] // a.batch):
            idx = order[i * a.batch:(i + 1) * a.batch]
            xb = ((augment(xt[idx], gen).float() / 255 - mean) / std).contiguous(memory_format=torch.channels_last)
            with torch.autocast('cuda', dtype=dtype):
                loss = lossf(model(xb), yt[idx])
            opt.zero_grad(set_to_none=True); scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
            sched.step()
        torch.cuda.synchronize(); epoch_times.append(time.perf_counter() - t0)
        va = evaluate(model, xv, yv, mean, std, 1000, dtype) if a.val else float('nan')
        print(f'epoch {ep + 1}/{a.epochs} loss {loss.item():.3f} val {va:.2f}% {epoch_times[-1]:.2f}s', flush=True)
        if a.ckpt:  # written whole, then renamed: a killed run keeps the last epoch's
            torch.save({'model': model.state_dict(), 'opt': opt.state_dict(), 'sched': sched.state_dict(),
                        'scaler': scaler.state_dict(), 'gen': gen.get_state(), 'epoch': ep + 1,
                        'epoch_times': epoch_times, 'val': va}, a.ckpt + '.tmp')
            os.replace(a.ckpt + '.tmp', a.ckpt)
    te = evaluate(model, xe, ye, mean, std, 1000, dtype)
    train_s = sum(epoch_times)  # resumed runs: the epochs of every call
    print(json.dumps({'tool': 'train_pytorch', 'model': a.model, 'epochs': a.epochs, 'dtype': a.dtype, 'init': a.init,
                      'parameters': nparams, 'lr': lr, 'batch': a.batch,
                      'train_seconds': round(train_s, 2), 'seconds_per_epoch_median': round(float(np.median(epoch_times)), 3),
                      'first_epoch_seconds': round(epoch_times[0], 2), 'val_accuracy': va, 'test_accuracy': te}))


if __name__ == '__main__':
    main()
