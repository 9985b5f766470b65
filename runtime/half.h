// IEEE half precision (fp16) on the host: the one conversion every tool
// uses for fp16 files, codebooks and rounding (round to nearest, ties to even).
#ifndef SC_HALF_H
#define SC_HALF_H

#include <stdint.h>

// Rounds a float to the nearest IEEE half (ties to even); overflow gives inf, NaN stays NaN.
uint16_t half_from_float(float f);
// Widens an IEEE half to a float (exact).
float half_to_float(uint16_t h);
// Rounds x to the nearest fp16 value, widened back to float; *overflow (when
// not NULL) is 1 when the result is +-inf (|x| >= 65520, or x infinite).
float half_round(float x, int *overflow);

#endif
