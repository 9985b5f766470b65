// The synthetic CIFAR-format generator: each class is a shape (disc, square,
// ring, ...) drawn in a mostly class-specific colour at a random size and
// place, at a contrast from faint to full, on a random graded background,
// with a distractor blob and pixel noise. A small CNN reaches about 30% / 55%
// test accuracy after one / two epochs and about 93% after thirty (measured
// with a LeNet-like net in PyTorch), so it is learnable but not trivial.
// Everything is integer arithmetic on one seeded generator per image, so the
// bytes are identical on every machine and compiler.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "datasets/cifar.h"
#include "runtime/rng.h"

// Ten foreground colours; class c prefers palette[(c / 10 + c) % 10].
static const uint8_t synth_palette[10][3] = {
    {230, 40, 40},  {40, 200, 60},  {50, 80, 230},  {240, 220, 40}, {200, 60, 220},
    {40, 210, 220}, {250, 140, 30}, {130, 80, 40},  {245, 245, 245}, {20, 20, 20},
};

// --- drawing ----------------------------------------------------------------

// Absolute value of an int.
static int iabs(int a) { return a < 0 ? -a : a; }

// Larger of two ints.
static int imax(int a, int b) { return a > b ? a : b; }

// Clamps v to a pixel byte.
static uint8_t clamp_byte(int v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }

// True when offset (u, v) from the centre lies inside shape `shape` of size r.
static int synth_shape_hit(int shape, int u, int v, int r) {
    int au = iabs(u), av = iabs(v), m = imax(au, av);
    switch (shape) {
    case 0: return u * u + v * v <= r * r;                                  // disc
    case 1: return 5 * m <= 4 * r;                                          // square
    case 2: return u * u + v * v <= r * r && u * u + v * v > (r - 3) * (r - 3);  // ring
    case 3: return (au <= 1 && av <= r) || (av <= 1 && au <= r);            // plus
    case 4: return (iabs(u - v) <= 1 || iabs(u + v) <= 1) && 4 * m <= 3 * r;  // cross
    case 5: return v >= -r && v <= r && 2 * au <= v + r;                    // triangle
    case 6: return m <= r && ((v + r) / 2) % 2 == 0;                        // h. stripes
    case 7: return m <= r && ((u + r) / 2) % 2 == 0;                        // v. stripes
    case 8: return au + av <= r;                                            // diamond
    default: return m <= r && m >= r - 1;                                   // frame
    }
}

// Integer noise, roughly normal with standard deviation ~16.5 (sum of three uniforms).
static int synth_noise(rng *r) {
    int s = 0;
    for (int k = 0; k < 3; k++) s += (int)rng_below(r, 33) - 16;
    return s;
}

// Draws one image of class cls into img (3, 32, 32) from the generator r. The
// shape's contrast against the background varies from faint to full, so a
// few images are hard or impossible to classify.
static void synth_image_draw(rng *r, int cls, uint8_t *img) {
    int shape = cls % 10, radius = 5 + (int)rng_below(r, 7);
    int cx = 10 + (int)rng_below(r, 13), cy = 10 + (int)rng_below(r, 13);
    int pal = rng_below(r, 4) ? (cls / 10 + cls) % 10 : (int)rng_below(r, 10);
    int alpha = 4 + (int)rng_below(r, 13);  // contrast in 16ths: 1/4 .. 1
    int fg[3], bg[3], gx[3], gy[3], blob[3];
    for (int c = 0; c < 3; c++) {
        bg[c] = (int)rng_below(r, 256);
        fg[c] = bg[c] + (synth_palette[pal][c] + (int)rng_below(r, 61) - 30 - bg[c]) * alpha / 16;
        gx[c] = (int)rng_below(r, 61) - 30;
        gy[c] = (int)rng_below(r, 61) - 30;
        blob[c] = (int)rng_below(r, 256);
    }
    int has_blob = (int)rng_below(r, 2), br = 2 + (int)rng_below(r, 3);
    int bx = (int)rng_below(r, 32), by = (int)rng_below(r, 32);
    for (int y = 0; y < CIFAR_SIDE; y++) {
        for (int x = 0; x < CIFAR_SIDE; x++) {
            int in = synth_shape_hit(shape, x - cx, y - cy, radius);
            int bl = has_blob && (x - bx) * (x - bx) + (y - by) * (y - by) <= br * br;
            for (int c = 0; c < 3; c++) {
                int grad = (gx[c] * (x - 16) + gy[c] * (y - 16)) / 16;
                int v = in ? fg[c] + grad : bl ? blob[c] : bg[c] + grad;
                img[c * 1024 + y * CIFAR_SIDE + x] = clamp_byte(v + synth_noise(r));
            }
        }
    }
}

// --- files ------------------------------------------------------------------

// Builds n records (n, 3074) of one split (0 train, 1 test) into a new buffer.
static uint8_t *synth_records_make(int n, int classes, uint64_t seed, int split) {
    uint8_t *buf = malloc((size_t)n * CIFAR100_RECORD);
    int *lab = malloc((size_t)n * sizeof(int));
    if (!buf || !lab) {
        free(buf);
        free(lab);
        return NULL;
    }
    uint64_t base = (uint64_t)(split + 1) << 40;
    rng r;
    rng_seed(&r, seed, base | 0xffffffffULL);
    for (int i = 0; i < n; i++) lab[i] = i % classes;  // balanced classes, shuffled order
    rng_shuffle(&r, lab, n);
    for (int i = 0; i < n; i++) {
        uint8_t *rec = buf + (size_t)i * CIFAR100_RECORD;
        rec[0] = (uint8_t)(lab[i] / 5);
        rec[1] = (uint8_t)lab[i];
        rng_seed(&r, seed, base | (uint64_t)i);
        synth_image_draw(&r, lab[i], rec + 2);
    }
    free(lab);
    return buf;
}

// Writes size bytes to <dir>/<name> through a unique temporary file and a
// rename, so readers and concurrent writers only ever see whole files.
static int file_write_atomic(const char *dir, const char *name, const uint8_t *data,
                             size_t size, sc_err *err) {
    char tmp[1200], dst[1200];
    if (snprintf(dst, sizeof dst, "%s/%s", dir, name) >= (int)sizeof dst ||
        snprintf(tmp, sizeof tmp, "%s/.%s.XXXXXX", dir, name) >= (int)sizeof tmp)
        return sc_fail(err, "path too long (%s/%s)", dir, name);
    int fd = mkstemp(tmp);
    if (fd < 0) return sc_fail(err, "cannot write file (%s): %s", dst, strerror(errno));
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        close(fd);
        unlink(tmp);
        return sc_fail(err, "cannot write file (%s): %s", dst, strerror(errno));
    }
    int ok = fchmod(fd, 0644) == 0;
    ok = fwrite(data, 1, size, f) == size && ok;
    ok = fflush(f) == 0 && ok;
    ok = fsync(fd) == 0 && ok;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, dst) != 0) {
        int e = errno;
        unlink(tmp);
        return sc_fail(err, "cannot write file (%s): %s", dst, strerror(e));
    }
    return 0;
}

// Writes <dir>/train.bin and <dir>/test.bin of the synthetic set; see cifar.h.
int synthetic_write(const char *dir, int ntrain, int ntest, int classes, uint64_t seed,
                    sc_err *err) {
    if (ntrain < 1 || ntest < 1)
        return sc_fail(err, "bad synthetic size (%d train, %d test images)", ntrain, ntest);
    if (classes < 1 || classes > 100)
        return sc_fail(err, "bad synthetic class count (%d, expected 1..100)", classes);
    const int counts[2] = {ntrain, ntest};
    const char *names[2] = {"train.bin", "test.bin"};
    for (int s = 0; s < 2; s++) {
        uint8_t *buf = synth_records_make(counts[s], classes, seed, s);  // (n, 3074)
        if (!buf) return sc_fail(err, "out of memory (%d synthetic images)", counts[s]);
        int rc = file_write_atomic(dir, names[s], buf, (size_t)counts[s] * CIFAR100_RECORD, err);
        free(buf);
        SC_TRY(rc);
    }
    return 0;
}
