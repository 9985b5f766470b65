// GPU test of the latency table's measurement (prune/latency_measure.c) on
// resnet20: in fp16 on the mixed fp16 engine at batch 128, in fp32 on deploy's
// per-layer plan at batch 32. Every layer's time at every grid sparsity is
// finite and positive, the chosen path is never much slower than dense
// (timing noise allowed), the table is keyed to this GPU and its plan and
// fits it, the net is restored, and at 90% everywhere the table's prediction
// is within 10% of the engine's measured whole graph (fp16), within a
// factor of the per-layer plan's summed ops (fp32); each prunable layer's
// measured op time is positive and they add up to no more than all the ops;
// the search's latency check (prune_lat_measure_graph) times the same graph
// within 25%. Skips without a GPU.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "prune/latency.h"
#include "prune/latency_setup.h"
#include "runtime/rng.h"

// The table's per-layer times: finite, positive, never far above dense.
static void check_layers(tctx *t, const lat_table *tb) {
    CHECK(t, tb->rest_ms >= 0 && isfinite(tb->rest_ms), "rest %g", tb->rest_ms);
    for (int l = 0; l < tb->L; l++) {
        double d = tb->ms[l * tb->G];
        CHECK(t, d > 0 && isfinite(d), "layer %s dense %g", tb->name[l], d);
        for (int g = 1; g < tb->G; g++) {
            double v = tb->ms[l * tb->G + g];
            CHECK(t, v > 0 && isfinite(v) && v <= 1.5 * d + 0.01, "layer %s at %.2f: %g ms vs dense %g",
                  tb->name[l], tb->grid[g], v, d);
        }
    }
}

// The model at 90% everywhere measured on the table's plan against the prediction.
static void check_model(tctx *t, const lat_table *tb, net *nt, const prune_layers *pl) {
    sc_err err = {0};
    double sp[64], lms[64], sum = 0, graph = 0, lsum = 0;
    CHECK(t, pl->n <= 64, "%d prunable layers", pl->n);
    if (pl->n > 64) return;
    for (int l = 0; l < pl->n; l++) sp[l] = 0.9;
    CHECK(t, prune_mask_raise(nt, pl, sp, NULL, (prune_crit){.alpha = 1, .beta = 0}, NULL, &err) == 0,
          "masks: %s", err.msg);
    int rc = lat_model_measure(&tb->key, nt, pl, NULL, lms, &sum, &graph, &err);
    CHECK(t, rc == 0 && sum > 0 && graph > 0, "model: %s", err.msg);
    if (rc) return;
    for (int l = 0; l < pl->n; l++) {  // every prunable layer of resnet20 has an op of its own
        CHECK(t, isfinite(lms[l]) && lms[l] > 0, "layer %s: %g ms", tb->name[l], lms[l]);
        lsum += isfinite(lms[l]) ? lms[l] : 0.0;
    }
    CHECK(t, lsum <= sum * (1 + 1e-9), "layers %g ms > the sum of all ops %g ms", lsum, sum);
    prune_lat_probe probe = {.t = tb, .pat = NULL};
    double check = 0;
    CHECK(t, prune_lat_measure_graph(&probe, nt, pl, &check, &err) == 0 && fabs(check / graph - 1.0) <= 0.25,
          "latency check: %s %g ms vs the graph's %g ms", err.msg, check, graph);
    double pred = lat_predict(tb, sp);
    printf("  at 0.9: predicted %.4f ms, measured graph %.4f ms (sum of ops %.4f), error %+.1f%%\n", pred, graph,
           sum, 100.0 * (pred / graph - 1.0));
    if (!strcmp(tb->key.plan, LAT_PLAN_MIXED))
        CHECK(t, fabs(pred / graph - 1.0) <= 0.10, "prediction %g vs measured graph %g", pred, graph);
    else
        CHECK(t, pred < 3 * sum && sum < 3 * pred, "prediction %g vs measured %g", pred, sum);
}

// One precision at a batch: measure, check, predict, measure the model at 90%.
static void measure_prec(tctx *t, const char *prec, int batch, const char *source) {
    sc_err err = {0};
    lat_key key = {.batch = batch};
    if (lat_gpu_key(&key, &err)) {
        SKIP(t, "no GPU: %s", err.msg);
        return;
    }
    snprintf(key.arch, sizeof key.arch, "resnet20");
    snprintf(key.precision, sizeof key.precision, "%s", prec);
    snprintf(key.plan, sizeof key.plan, "%s", lat_plan_for(prec));
    net *nt = net_create("resnet20", 3, 32, 32, 10, &err);
    prune_layers pl;
    CHECK(t, nt && prune_layers_init(&pl, nt, &err) == 0, "net: %s", err.msg);
    if (!nt) return;
    rng r;
    rng_seed(&r, 5, 0);
    net_init_weights(nt, &r);
    float first = nt->param[pl.offset[0]];
    lat_table tb;
    int rc = lat_table_measure(&tb, &key, nt, &pl, NULL, stdout, &err);
    CHECK(t, rc == 0, "measure %s: %s", prec, err.msg);
    CHECK(t, nt->param[pl.offset[0]] == first && nt->mask[pl.offset[0]] == 1.0f, "net not restored");
    if (rc) goto done;
    char why[200] = "";
    CHECK(t, lat_table_fits(&tb, &key, nt, &pl, why, sizeof why), "%s", why);
    CHECK(t, strstr(tb.source, source) != NULL, "source %s, want %s", tb.source, source);
    check_layers(t, &tb);
    printf("  %s %s batch %d (%s): dense %.4f ms predicted (rest %.4f)\n", key.gpu, prec, key.batch, tb.source,
           lat_dense_ms(&tb), tb.rest_ms);
    check_model(t, &tb, nt, &pl);
    lat_table_free(&tb);
done:
    prune_layers_free(&pl);
    net_free(nt);
}

// fp16: the mixed fp16 engine at prune's default latency batch.
static void test_measure_fp16(tctx *t) { measure_prec(t, "fp16", 128, "mixed fp16 engine"); }

// fp32: deploy's per-layer plan.
static void test_measure_fp32(tctx *t) { measure_prec(t, "fp32", 32, "per-layer plan (fp32)"); }

int main(void) {
    tctx t = {.suite = "gpu_test_latency"};
    RUN(&t, test_measure_fp16);
    RUN(&t, test_measure_fp32);
    return check_finish(&t);
}
