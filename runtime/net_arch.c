// Built-in architectures, generated as description text (runtime/net.h) so
// that every net, built-in or custom, goes through the same parser.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net.h"

const char *const net_arch_names[] = {"lenet", "resnet18", "resnet20", "resnet32", "resnet50",
                                      "resnet56", "vgg11", "vgg13", "vgg16", "vgg19",
                                      "densenet121", NULL};

// --- a growing text buffer --------------------------------------------------

typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} sbuf;

// Appends formatted text; remembers allocation failure in b->oom.
static void sb_add(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->oom || n < 0) return;
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 1024) + (size_t)n;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

// --- architectures ----------------------------------------------------------

// LeNet-5 style net for tests: two 5x5 convs with max pooling, three linears.
static void arch_lenet(sbuf *b) {
    sb_add(b, "# LeNet-style net (small, for tests)\n"
              "conv 6 5 name=conv1\nrelu\nmaxpool 2\n"
              "conv 16 5 name=conv2\nrelu\nmaxpool 2\n"
              "linear 120 name=fc1\nrelu\nlinear 84 name=fc2\nrelu\nlinear classes name=fc3\n");
}

// One basic residual block (two 3x3 convs); a 1x1 conv + BN shortcut when the
// shape changes. The shortcut comes first so the block ends bn, add, relu.
static void resnet_block(sbuf *b, const char *pfx, const char *in, int ch, int stride,
                         int project) {
    const char *other = in;
    char sc[64];
    if (project) {
        sb_add(b, "conv %d 1 stride=%d bias=0 name=%s.shortcut from=%s\n", ch, stride, pfx, in);
        sb_add(b, "bn name=%s.shortcut.bn\n", pfx);
        snprintf(sc, sizeof sc, "%s.shortcut.bn", pfx);
        other = sc;
    }
    sb_add(b, "conv %d 3 stride=%d pad=1 bias=0 name=%s.conv1 from=%s\n", ch, stride, pfx, in);
    sb_add(b, "bn name=%s.bn1\nrelu name=%s.relu1\n", pfx, pfx);
    sb_add(b, "conv %d 3 pad=1 bias=0 name=%s.conv2\n", ch, pfx);
    sb_add(b, "bn name=%s.bn2\n", pfx);
    sb_add(b, "add %s name=%s.add\nrelu name=%s.out\n", other, pfx, pfx);
}

// One bottleneck block (1x1 reduce, 3x3 with the stride, 1x1 expand to 4x
// the width), K. He, X. Zhang, S. Ren, J. Sun, "Deep Residual Learning for
// Image Recognition", CVPR 2016; a 1x1 conv + BN shortcut when the shape
// changes, first, so the block ends bn, add, relu.
static void resnet_bottleneck(sbuf *b, const char *pfx, const char *in, int width, int stride,
                              int project) {
    const char *other = in;
    char sc[64];
    if (project) {
        sb_add(b, "conv %d 1 stride=%d bias=0 name=%s.shortcut from=%s\n", 4 * width, stride, pfx, in);
        sb_add(b, "bn name=%s.shortcut.bn\n", pfx);
        snprintf(sc, sizeof sc, "%s.shortcut.bn", pfx);
        other = sc;
    }
    sb_add(b, "conv %d 1 bias=0 name=%s.conv1 from=%s\nbn name=%s.bn1\nrelu name=%s.relu1\n", width, pfx,
           in, pfx, pfx);
    sb_add(b, "conv %d 3 stride=%d pad=1 bias=0 name=%s.conv2\nbn name=%s.bn2\nrelu name=%s.relu2\n",
           width, stride, pfx, pfx, pfx);
    sb_add(b, "conv %d 1 bias=0 name=%s.conv3\nbn name=%s.bn3\n", 4 * width, pfx, pfx);
    sb_add(b, "add %s name=%s.add\nrelu name=%s.out\n", other, pfx, pfx);
}

// CIFAR ResNet: 3x3 stem, no max-pool, stages of basic blocks (expansion
// 1) or bottlenecks (expansion 4), GAP, linear.
static void arch_resnet(sbuf *b, const int *widths, const int *blocks, int nstages, int expansion) {
    sb_add(b, "conv %d 3 pad=1 bias=0 name=conv1\nbn name=bn1\nrelu name=relu1\n", widths[0]);
    char in[64] = "relu1";
    int ch = widths[0];
    for (int s = 0; s < nstages; s++) {
        for (int i = 0; i < blocks[s]; i++) {
            char pfx[48];
            snprintf(pfx, sizeof pfx, "layer%d.%d", s + 1, i);
            int stride = (i == 0 && s > 0) ? 2 : 1;
            int project = stride != 1 || ch != expansion * widths[s];
            if (expansion == 1) resnet_block(b, pfx, in, widths[s], stride, project);
            else resnet_bottleneck(b, pfx, in, widths[s], stride, project);
            ch = expansion * widths[s];
            snprintf(in, sizeof in, "%s.out", pfx);
        }
    }
    sb_add(b, "gap name=pool\nlinear classes name=fc\n");
}

// CIFAR DenseNet (G. Huang, Z. Liu, L. van der Maaten, K. Q. Weinberger,
// "Densely Connected Convolutional Networks", CVPR 2017), DenseNet-BC: a
// 3x3 stem of 2*growth channels; in each dense block, layers of BN-ReLU-
// conv 1x1 (4*growth) and BN-ReLU-conv 3x3 (growth) whose output is
// concatenated before their input; between blocks, BN-ReLU-conv 1x1 to half
// the channels and a 2x2 average pool; BN-ReLU, GAP and a linear head.
static void arch_densenet(sbuf *b, const int *blocks, int nblocks, int growth) {
    int ch = 2 * growth;
    sb_add(b, "conv %d 3 pad=1 bias=0 name=conv1\n", ch);
    char in[64] = "conv1";
    for (int d = 0; d < nblocks; d++) {
        for (int l = 0; l < blocks[d]; l++) {
            char pfx[48];
            snprintf(pfx, sizeof pfx, "dense%d.%d", d + 1, l);
            sb_add(b, "bn name=%s.bn1 from=%s\nrelu name=%s.relu1\nconv %d 1 bias=0 name=%s.conv1\n", pfx,
                   in, pfx, 4 * growth, pfx);
            sb_add(b, "bn name=%s.bn2\nrelu name=%s.relu2\nconv %d 3 pad=1 bias=0 name=%s.conv2\n", pfx,
                   pfx, growth, pfx);
            sb_add(b, "concat %s name=%s.cat\n", in, pfx);
            snprintf(in, sizeof in, "%s.cat", pfx);
            ch += growth;
        }
        if (d == nblocks - 1) break;
        ch /= 2;
        sb_add(b, "bn name=trans%d.bn\nrelu name=trans%d.relu\nconv %d 1 bias=0 name=trans%d.conv\n", d + 1,
               d + 1, ch, d + 1);
        sb_add(b, "avgpool 2 name=trans%d.pool\n", d + 1);
        snprintf(in, sizeof in, "trans%d.pool", d + 1);
    }
    sb_add(b, "bn name=bn\nrelu name=relu\ngap name=pool\nlinear classes name=fc\n");
}

// VGG with batch norm; cfg lists channels, 0 = 2x2 max-pool; one linear head.
static void arch_vgg(sbuf *b, const int *cfg, int n) {
    int conv = 0, pool = 0;
    for (int i = 0; i < n; i++) {
        if (cfg[i] == 0) {
            sb_add(b, "maxpool 2 name=pool%d\n", ++pool);
            continue;
        }
        conv++;
        sb_add(b, "conv %d 3 pad=1 bias=0 name=conv%d\nbn name=bn%d\nrelu name=relu%d\n", cfg[i],
               conv, conv, conv);
    }
    sb_add(b, "linear classes name=fc\n");
}

// The peak learning rate of `train --lr auto` for an architecture.
double net_arch_auto_lr(const char *arch) {
    return strstr(arch, "resnet") || strstr(arch, "vgg") || strstr(arch, "densenet") ? 0.4 : 0.05;
}

// Returns the description text of a built-in architecture (caller frees).
char *net_arch_desc(const char *arch, sc_err *err) {
    static const int v11[] = {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
    static const int v13[] = {64, 64, 0, 128, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
    static const int v16[] = {64,  64,  0,   128, 128, 0,   256, 256, 256,
                              0,   512, 512, 512, 0,   512, 512, 512, 0};
    static const int v19[] = {64,  64,  0,   128, 128, 0,   256, 256, 256, 256, 0,
                              512, 512, 512, 512, 0,   512, 512, 512, 512, 0};
    static const int w18[] = {64, 128, 256, 512}, b18[] = {2, 2, 2, 2};
    static const int w20[] = {16, 32, 64}, b20[] = {3, 3, 3}, b32[] = {5, 5, 5},
                     b56[] = {9, 9, 9}, b50[] = {3, 4, 6, 3}, d121[] = {6, 12, 24, 16};
    sbuf b = {0};
    sb_add(&b, "# %s (sparsecnn built-in)\n", arch);
    if (!strcmp(arch, "lenet")) arch_lenet(&b);
    else if (!strcmp(arch, "resnet18")) arch_resnet(&b, w18, b18, 4, 1);
    else if (!strcmp(arch, "resnet20")) arch_resnet(&b, w20, b20, 3, 1);
    else if (!strcmp(arch, "resnet32")) arch_resnet(&b, w20, b32, 3, 1);
    else if (!strcmp(arch, "resnet50")) arch_resnet(&b, w18, b50, 4, 4);
    else if (!strcmp(arch, "resnet56")) arch_resnet(&b, w20, b56, 3, 1);
    else if (!strcmp(arch, "densenet121")) arch_densenet(&b, d121, 4, 32);
    else if (!strcmp(arch, "vgg11")) arch_vgg(&b, v11, (int)(sizeof v11 / sizeof *v11));
    else if (!strcmp(arch, "vgg13")) arch_vgg(&b, v13, (int)(sizeof v13 / sizeof *v13));
    else if (!strcmp(arch, "vgg16")) arch_vgg(&b, v16, (int)(sizeof v16 / sizeof *v16));
    else if (!strcmp(arch, "vgg19")) arch_vgg(&b, v19, (int)(sizeof v19 / sizeof *v19));
    else {
        free(b.s);
        sc_fail(err, "unknown model (%s); known: lenet, resnet18, resnet20, resnet32, resnet50, "
                     "resnet56, vgg11, vgg13, vgg16, vgg19, densenet121, or a description file", arch);
        return NULL;
    }
    if (b.oom) {
        free(b.s);
        sc_fail(err, "out of memory");
        return NULL;
    }
    return b.s;
}
