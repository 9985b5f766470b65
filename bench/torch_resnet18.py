"""Side-by-side reference for bench/gpu_train_bench: ResNet-18 (CIFAR variant,
the same graph as sparsecnn's built-in resnet18) training steps in PyTorch
with cudnn.benchmark, channels_last and bf16 autocast (or fp32), SGD with
Nesterov momentum, label smoothing 0.1, on random data already on the GPU.
Prints the median ms/step over windows timed with CUDA events.

    python3 bench/torch_resnet18.py [bf16|fp32] [batch] [windows] [steps]
"""
import sys
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.sc = None
        if stride != 1 or cin != cout:
            self.sc = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        o = F.relu(self.b1(self.c1(x)))
        o = self.b2(self.c2(o))
        return F.relu(o + (self.sc(x) if self.sc is not None else x))


class ResNet18(nn.Module):
    def __init__(self, classes=100):
        super().__init__()
        self.c1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.b1 = nn.BatchNorm2d(64)
        layers, cin = [], 64
        for i, w in enumerate([64, 128, 256, 512]):
            for j in range(2):
                layers.append(Block(cin, w, 2 if (j == 0 and i > 0) else 1))
                cin = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.layers(F.relu(self.b1(self.c1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "bf16"
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 512
    windows = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    model = ResNet18().to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    crit = nn.CrossEntropyLoss(label_smoothing=0.1)
    xs = [torch.randn(batch, 3, 32, 32, device=dev).to(memory_format=torch.channels_last) for _ in range(4)]
    ys = [torch.randint(0, 100, (batch,), device=dev) for _ in range(4)]

    def step(i):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(mode == "bf16")):
            loss = crit(model(xs[i % 4]), ys[i % 4])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for i in range(15):
        step(i)
    torch.cuda.synchronize()
    times = []
    for w in range(windows):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for i in range(steps):
            step(i)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / steps)
    times.sort()
    med = times[len(times) // 2]
    print(f"RESULT torch resnet18 {mode} batch {batch}: median {med:.3f} ms/step = "
          f"{batch / med * 1e3:.0f} images/s (min {times[0]:.3f}, max {times[-1]:.3f}); "
          f"{45000 / batch * med / 1e3:.2f} s per 45000-image epoch")


if __name__ == "__main__":
    main()
