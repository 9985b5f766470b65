// Channel concatenation, CPU reference (kernels/concat.h): plain copies of
// contiguous (c * inner) runs, one per outer index.
#include "kernels/concat.h"

#include <string.h>

// Copies x into its channel slice of y.
void concat_forward_cpu(size_t outer, int c, size_t inner, int ctot, int off, const float *x,
                        float *y) {
    const size_t run = (size_t)c * inner, stride = (size_t)ctot * inner;
    for (size_t o = 0; o < outer; o++)
        memcpy(y + o * stride + (size_t)off * inner, x + o * run, run * sizeof *x);
}

// dx (+)= the channel slice of dy.
void concat_backward_cpu(size_t outer, int c, size_t inner, int ctot, int off, const float *dy,
                         float *dx, int accumulate) {
    const size_t run = (size_t)c * inner, stride = (size_t)ctot * inner;
    for (size_t o = 0; o < outer; o++) {
        const float *s = dy + o * stride + (size_t)off * inner;
        float *d = dx + o * run;
        if (accumulate)
            for (size_t i = 0; i < run; i++) d[i] += s[i];
        else
            memcpy(d, s, run * sizeof *s);
    }
}
