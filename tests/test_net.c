// Tests of the network graph: built-in architectures, the description
// parser's shapes and errors, weight init and the flat layouts.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/net.h"

// Counts trainable floats of a built-in arch for 100 classes.
static size_t arch_params(const char *arch) {
    sc_err err = {0};
    net *nt = net_create(arch, 3, 32, 32, 100, &err);
    if (!nt) return 0;
    size_t n = nt->nparam;
    net_free(nt);
    return n;
}

// Parameter counts match the well-known figures of each architecture.
static void test_param_counts(tctx *t) {
    // resnet18 (CIFAR, 100 classes): 11,220,132 trainable parameters in PyTorch.
    CHECK(t, arch_params("resnet18") == 11220132, "resnet18 %zu", arch_params("resnet18"));
    // vgg16_bn CIFAR with one 512->100 linear, convs without bias: 14,728,266 + BN.
    size_t v = arch_params("vgg16");
    CHECK(t, v == 14710464 + 8448 + 51300, "vgg16 %zu", v);
    // lenet: conv 3*6*25+6, conv 6*16*25+16, 400*120+120, 120*84+84, 84*100+100.
    CHECK(t, arch_params("lenet") == 456 + 2416 + 48120 + 10164 + 8500, "lenet");
    // resnet50 and densenet121 (CIFAR variants: 3x3 stem, no max pool; DenseNet-BC
    // growth 32, reduction 0.5) as the common PyTorch CIFAR versions count them:
    // 23,520,842 and 6,956,298 for 10 classes, plus 90 more outputs of 2048 / 1024 inputs.
    CHECK(t, arch_params("resnet50") == 23520842 + 90 * 2049, "resnet50 %zu", arch_params("resnet50"));
    CHECK(t, arch_params("densenet121") == 6956298 + 90 * 1025, "densenet121 %zu",
          arch_params("densenet121"));
    for (const char *const *a = net_arch_names; *a; a++)
        CHECK(t, arch_params(*a) > 0, "%s does not build", *a);
}

// Residual wiring: the add layers refer to the right sources and shapes.
static void test_resnet_wiring(tctx *t) {
    sc_err err = {0};
    net *nt = net_create("resnet20", 3, 32, 32, 10, &err);
    CHECK(t, nt != NULL, "%s", err.msg);
    if (!nt) return;
    int adds = 0;
    for (int i = 0; i < nt->nlayers; i++) {
        const layer *L = &nt->layers[i];
        if (L->kind != LK_ADD) continue;
        adds++;
        CHECK(t, L->src == i - 1 && nt->layers[L->src].kind == LK_BN, "add %s src", L->name);
        CHECK(t, nt->layers[i + 1].kind == LK_RELU, "add %s not followed by relu", L->name);
    }
    CHECK(t, adds == 9, "resnet20 has %d adds", adds);
    const layer *last = &nt->layers[nt->nlayers - 1];
    CHECK(t, last->kind == LK_LINEAR && last->in_c == 64 && last->c == 10, "head");
    net_free(nt);
}

// Only conv/linear weights are prunable, and never the first conv.
static void test_prunable(tctx *t) {
    sc_err err = {0};
    net *nt = net_create("vgg11", 3, 32, 32, 10, &err);
    if (!nt) { CHECK(t, 0, "%s", err.msg); return; }
    int first = net_tensor_find(nt, "conv1.weight");
    CHECK(t, first >= 0 && !nt->tensors[first].prunable, "first conv must not be prunable");
    int n = 0;
    for (int i = 0; i < nt->ntensors; i++) n += nt->tensors[i].prunable;
    CHECK(t, n == 7 + 1, "vgg11 prunable tensors %d", n);
    CHECK(t, net_sparsity(nt) == 0.0, "fresh net sparsity");
    net_free(nt);
}

// Name prefixes: the longest that a name starts with wins ("conv1" also
// starts "conv10"); a prefix of only the unpruned first conv, or of nothing,
// is unmatched.
static void test_prefixes(tctx *t) {
    sc_err err = {0};
    net *nt = net_create("vgg16", 3, 32, 32, 10, &err);
    if (!nt) { CHECK(t, 0, "%s", err.msg); return; }
    const char *p[] = {"conv1", "conv10", "conv", "fc"};
    CHECK(t, net_prefix_longest("conv10.weight", p, 4) == 1, "conv10");
    CHECK(t, net_prefix_longest("conv11.weight", p, 4) == 0, "conv11");
    CHECK(t, net_prefix_longest("conv5.weight", p, 4) == 2, "conv5");
    CHECK(t, net_prefix_longest("bn1.gamma", p, 4) == -1, "bn1");
    CHECK(t, net_prefix_unmatched(nt, p, 4) == -1, "all match");
    const char *q[] = {"conv2", "conv1.", "layer"};
    CHECK(t, net_prefix_unmatched(nt, q, 3) == 1, "conv1. (unpruned) matched");
    CHECK(t, net_prefix_unmatched(nt, q + 2, 1) == 0, "layer matched");
    net_free(nt);
}

// net_prefix_items' callback: appends "prefix|value;" (prefix "-" for a bare item) to the char[256] ctx.
static int record_item(void *ctx, const char *prefix, size_t plen, const char *value, sc_err *err) {
    char *out = ctx;
    size_t n = strlen(out);
    snprintf(out + n, 256 - n, "%.*s|%s;", prefix ? (int)plen : 1, prefix ? prefix : "-", value);
    return strcmp(value, "stop") ? 0 : sc_fail(err, "stopped at %s", value);
}

// The per-layer list splitter: items in order, bare items where allowed, and
// each malformed list refused with its own message.
static void test_prefix_items(tctx *t) {
    sc_err err = {0};
    char got[256] = "";
    CHECK(t, net_prefix_items("layer1=0.9,layer1.0=a,16x8", 1, record_item, got, &err) == 0, "%s", err.msg);
    CHECK(t, !strcmp(got, "layer1|0.9;layer1.0|a;-|16x8;"), "items: %s", got);
    const char *bad[] = {"", "a=1,", ",a=1", "a=1,,b=2", "=1", "a=1,a=2", "x,y", "b=1,c=stop"};
    const char *why[] = {"empty list", "empty item", "empty item", "empty item", "empty prefix",
                         "prefix 'a' given twice", "more than one item", "stopped at stop"};
    for (int k = 0; k < 8; k++) {
        got[0] = 0;
        CHECK(t, net_prefix_items(bad[k], 1, record_item, got, &err) != 0 && strstr(err.msg, why[k]),
              "'%s' accepted or wrong message (%s)", bad[k], err.msg);
    }
    got[0] = 0;
    CHECK(t, net_prefix_items("a=1,b", 0, record_item, got, &err) != 0 && strstr(err.msg, "no '=' in item 'b'"),
          "a bare item where none may be: %s", err.msg);
    CHECK(t, net_prefix_items("ab=1,a=2", 0, record_item, got, &err) == 0, "a prefix of another: %s", err.msg);
    char longer[NET_PREFIX_TEXT + 8];
    memset(longer, 'a', sizeof longer - 1);
    longer[sizeof longer - 1] = 0;
    longer[1] = '=';
    CHECK(t, net_prefix_items(longer, 0, record_item, got, &err) != 0 && strstr(err.msg, "longer than"),
          "an over-long list: %s", err.msg);
}

// Shapes of a custom description with stride, padding and pooling.
static void test_shapes(tctx *t) {
    sc_err err = {0};
    const char *d = "conv 5 3 stride=2 pad=1 name=a\nbn\nrelu\navgpool 3 stride=2 pad=1\n"
                    "conv 7 1 bias=0\ngap\nlinear classes\n";
    net *nt = net_from_desc("x", d, 3, 9, 7, 4, &err);
    CHECK(t, nt != NULL, "%s", err.msg);
    if (!nt) return;
    CHECK(t, nt->layers[0].h == 5 && nt->layers[0].w == 4, "conv out %dx%d", nt->layers[0].h,
          nt->layers[0].w);
    CHECK(t, nt->layers[3].h == 3 && nt->layers[3].w == 2, "pool out %dx%d", nt->layers[3].h,
          nt->layers[3].w);
    CHECK(t, nt->layers[4].bias == -1 && nt->layers[0].bias >= 0, "bias flags");
    net_free(nt);
}

// Every malformed description is rejected with a message naming the line.
static void test_bad_desc(tctx *t) {
    const char *bad[] = {
        "conv 5\nlinear classes\n",                 // missing kernel size
        "conv 0 3\nlinear classes\n",               // zero channels
        "conv 4 3 stride=x\nlinear classes\n",      // bad number
        "conv 4 3 colour=red\nlinear classes\n",    // unknown option
        "frob 3\nlinear classes\n",                 // unknown kind
        "conv 4 3\nadd nowhere\nlinear classes\n",  // unknown reference
        "conv 4 3\nadd input\nlinear classes\n",    // shape mismatch
        "conv 4 99\nlinear classes\n",              // empty output
        "conv 4 3 name=a\nconv 4 3 name=a\nlinear classes\n",  // duplicate name
        "conv 4 3\nlinear 7\n",                     // wrong class count
        "# nothing\n",                              // no layers
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        sc_err err = {0};
        net *nt = net_from_desc("x", bad[i], 3, 8, 8, 10, &err);
        CHECK(t, nt == NULL && err.msg[0], "description %zu accepted", i);
        net_free(nt);
    }
    sc_err err = {0};
    CHECK(t, net_create("resnet19", 3, 32, 32, 10, &err) == NULL && strstr(err.msg, "resnet19"),
          "unknown arch message: %s", err.msg);
}

// Kaiming init has the expected spread; BN starts at gamma 1, var 1.
static void test_init(tctx *t) {
    sc_err err = {0};
    net *nt = net_create("resnet20", 3, 32, 32, 10, &err);
    if (!nt) { CHECK(t, 0, "%s", err.msg); return; }
    rng r;
    rng_seed(&r, 7, 0);
    net_init_weights(nt, &r);
    int w = net_tensor_find(nt, "layer3.2.conv2.weight");
    const float *d = net_tensor_data(nt, w);
    double ss = 0;
    for (size_t i = 0; i < nt->tensors[w].count; i++) ss += (double)d[i] * d[i];
    double sd = sqrt(ss / (double)nt->tensors[w].count), want = sqrt(2.0 / (64 * 9));
    CHECK(t, fabs(sd - want) < 0.05 * want, "std %g want %g", sd, want);
    CHECK(t, net_tensor_data(nt, net_tensor_find(nt, "bn1.gamma"))[3] == 1.0f, "gamma");
    CHECK(t, net_tensor_data(nt, net_tensor_find(nt, "bn1.var"))[5] == 1.0f, "var");
    net_free(nt);
}

// The compute left after pruning: LeNet's first conv (6 filters 3x5x5 over a
// 28x28 output, 352,800 MACs) with half its weights masked drops by half of
// that; masking a BN-free layer's bias changes nothing; all kept: net_macs.
static void test_macs_kept(tctx *t) {
    sc_err err = {0};
    net *nt = net_create("lenet", 3, 32, 32, 10, &err);
    CHECK(t, nt != NULL, "lenet: %s", err.msg);
    if (!nt) return;
    CHECK_CLOSE(t, net_macs_kept(nt), net_macs(nt), 1e-12);
    int w = -1, b = -1;
    for (int i = 0; i < nt->ntensors; i++) {
        if (nt->tensors[i].layer != nt->tensors[0].layer) continue;
        if (nt->tensors[i].kind == PT_WEIGHT) w = i;
        if (nt->tensors[i].kind == PT_BIAS) b = i;
    }
    CHECK(t, w >= 0 && nt->tensors[w].count == 6 * 3 * 5 * 5, "conv1 weight tensor");
    if (w >= 0)
        for (size_t k = 0; k < nt->tensors[w].count / 2; k++) nt->mask[nt->tensors[w].offset + k] = 0.0f;
    if (b >= 0) nt->mask[nt->tensors[b].offset] = 0.0f;
    CHECK_CLOSE(t, net_macs_kept(nt), net_macs(nt) - 0.5 * 6 * 3 * 5 * 5 * 28 * 28, 1e-12);
    net_free(nt);
}

int main(void) {
    tctx t = {.suite = "test_net"};
    RUN(&t, test_param_counts);
    RUN(&t, test_resnet_wiring);
    RUN(&t, test_prunable);
    RUN(&t, test_prefixes);
    RUN(&t, test_prefix_items);
    RUN(&t, test_shapes);
    RUN(&t, test_bad_desc);
    RUN(&t, test_init);
    RUN(&t, test_macs_kept);
    return check_finish(&t);
}
