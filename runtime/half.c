// IEEE half precision on the host (see runtime/half.h).
#include "half.h"

#include <math.h>
#include <string.h>

// Rounds a float to the nearest IEEE half (ties to even); overflow gives inf.
uint16_t half_from_float(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    const uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
    if (ax < 0x38800000u) {  // below 2^-14: a half subnormal (or zero), exact scaling
        float a;
        memcpy(&a, &ax, sizeof a);
        return (uint16_t)(sign | (uint32_t)lrintf(a * 16777216.0f));
    }
    if (ax >= 0x47800000u) return (uint16_t)(sign | 0x7c00u);
    uint32_t h = ((((ax >> 23) - 112u)) << 10) | ((ax & 0x7fffffu) >> 13);
    const uint32_t rest = ax & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    if (h > 0x7c00u) h = 0x7c00u;
    return (uint16_t)(sign | h);
}

// Widens an IEEE half to a float (exact).
float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = ldexpf((float)m, -24);
        return sign ? -v : v;
    }
    uint32_t x = e == 31 ? (sign | 0x7f800000u | (m << 13)) : (sign | ((e + 112u) << 23) | (m << 13));
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

// Rounds x to the nearest fp16 value and widens it back; overflow says when
// the result is infinite (x beyond the fp16 range, or infinite itself).
float half_round(float x, int *overflow) {
    float r = half_to_float(half_from_float(x));
    if (overflow) *overflow = isinf(r) != 0;
    return r;
}
