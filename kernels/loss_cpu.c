// CPU softmax cross-entropy (label smoothing, or against soft targets),
// computed per image in double with the row maximum subtracted (no overflow
// for large logits).
#include "loss.h"

#include <math.h>
#include <stddef.h>

// Index of the first maximum of row (k).
static int loss_argmax(int k, const float *row) {
    int best = 0;
    for (int j = 1; j < k; j++)
        if (row[j] > row[best]) best = j;
    return best;
}

// For logits (N, K) and labels (N): returns the summed loss over the batch and
// the number of top-1 hits (*correct, may be NULL). When dlogits is not NULL it
// receives (softmax - target) * grad_scale, (N, K).
double softmax_xent_cpu(int n, int k, const float *logits, const int *labels, float smoothing,
                        float grad_scale, float *dlogits, long *correct) {
    const double off = (double)smoothing / k, on = 1.0 - smoothing + off;
    double total = 0.0;
    long hits = 0;
    for (int i = 0; i < n; i++) {
        const float *row = logits + (size_t)i * k;
        const int best = loss_argmax(k, row);
        const double mx = row[best];
        double se = 0.0, tdot = 0.0;  // sum exp(l - max), sum target * (l - max)
        for (int j = 0; j < k; j++) {
            se += exp(row[j] - mx);
            tdot += (j == labels[i] ? on : off) * (row[j] - mx);
        }
        total += log(se) - tdot;  // -sum t * log softmax, as sum t = 1
        hits += best == labels[i];
        if (!dlogits) continue;
        float *drow = dlogits + (size_t)i * k;
        for (int j = 0; j < k; j++) {
            const double t = j == labels[i] ? on : off;
            drow[j] = (float)((exp(row[j] - mx) / se - t) * grad_scale);
        }
    }
    if (correct) *correct = hits;
    return total;
}

// Cross-entropy of logits (N, K) against target distributions soft (N, K);
// top-1 hits against labels (may be NULL). Per image in double with the row
// maximum subtracted: loss = sum q * log(sum exp(l - max)) - sum q (l - max).
double soft_xent_cpu(int n, int k, const float *logits, const float *soft, const int *labels,
                     float grad_scale, float *dlogits, long *correct) {
    double total = 0.0;
    long hits = 0;
    for (int i = 0; i < n; i++) {
        const float *row = logits + (size_t)i * k, *q = soft + (size_t)i * k;
        const int best = loss_argmax(k, row);
        const double mx = row[best];
        double se = 0.0, sq = 0.0, tdot = 0.0;  // sum exp(l - max), sum q, sum q (l - max)
        for (int j = 0; j < k; j++) {
            se += exp(row[j] - mx);
            sq += q[j];
            tdot += q[j] * (row[j] - mx);
        }
        total += sq * log(se) - tdot;
        if (labels) hits += best == labels[i];
        if (!dlogits) continue;
        float *drow = dlogits + (size_t)i * k;
        for (int j = 0; j < k; j++)
            drow[j] = (float)((exp(row[j] - mx) / se * sq - q[j]) * grad_scale);
    }
    if (correct) *correct = labels ? hits : 0;
    return total;
}
