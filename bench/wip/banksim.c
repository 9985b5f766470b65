// CPU model of the vector kernel's gather: shared-memory wavefronts per load and per MMA, from the
// kernel's own pack (gather dealing), row order and addresses of tile 0 (a load takes as many wavefronts
// as the most distinct 4-byte words any bank serves). Needs session 38's eight bench/wip patches applied; build with
//   cc -O2 -I. -I/usr/include/hdf5/serial -fopenmp bench/wip/banksim.c build/libsparsecnn.a -lm -o banksim
// and run banksim C H TM SPARSITY STRIDE POOL CB K (e.g. 512 4 64 0.95 1 0 1 512: r18-512x4, 8x1 blocks).
#include "tests/bsconv_cases.h"
#include "kernels/bsconv_vec.h"
// Wavefronts of one shared load: max over banks of distinct 4-byte words.
static int wf(const unsigned *addr) {
    int best = 0;
    for (int b = 0; b < 32; b++) {
        unsigned w[32]; int n = 0;
        for (int l = 0; l < 32; l++) if ((addr[l] / 4) % 32 == (unsigned)b) {
            int seen = 0; for (int i = 0; i < n; i++) seen |= w[i] == addr[l] / 4;
            if (!seen) w[n++] = addr[l] / 4;
        }
        if (n > best) best = n;
    }
    return best;
}
int main(int argc, char **argv) {
    int C = atoi(argv[1]), H = atoi(argv[2]), tm = atoi(argv[3]); double sp = atof(argv[4]);
    int st = atoi(argv[5]), pool = atoi(argv[6]), cb = atoi(argv[7]), K = atoi(argv[8]);
    bsc_case c = {128, C, H, H, K, 3, 3, st, 1, 8, cb, sp, 0, 1, 0, 1, pool};
    bsc_layer L; bsc_make(&c, 4242, &L);
    bsconv_vpack p; sc_err err;
    if (bsconv_vpack_build(&L.s, &L.w, BSV_DEAL_GATHER, &p, &err)) { printf("%s\n", err.msg); return 1; }
    bsv_geom g; bsconv_vgeom_of(&L.s, tm, &g);
    unsigned char order[64]; bsconv_vec_row_order(&g, 0, order);
    long tot = 0, nl = 0;
    const int nld = p.pair ? 2 : 4;  // loads per (slice, row half): pairs one per half-step, else even/odd x 2 halves
    for (int gi = 0; gi < p.ng; gi++)
        for (int s = p.gstart[gi]; s < p.gstart[gi + 1]; s++)
            for (int mt = 0; mt < g.tm / 16; mt++)
                for (int h = 0; h < 2; h++)
                    for (int ld = 0; ld < nld; ld++) {
                        unsigned a[32];
                        for (int l = 0; l < 32; l++) {
                            int base, out; bsv_row(&g, 0, order[mt * 16 + (l >> 2) + h * 8], &base, &out);
                            int col = p.pair ? 2 * (l & 3) + 8 * ld : 2 * (l & 3) + (ld & 1) + 8 * (ld >> 1);
                            a[l] = (unsigned)(base + bsv_off(&g, p.codes[s * 16 + col])) * 2;
                        }
                        tot += wf(a), nl++;
                    }
    printf("C%d %dx%d s%d pool%d %dx%d tm%d sp%.2f pair %d: %ld loads (%.2f per MMA), %.3f wavefronts per load, %.2f per MMA (tile %dx%dx%d)\n",
           C, H, H, st, pool, 8, cb, tm, sp, p.pair, nl, (double)nl / (p.nsteps * (g.tm / 16)), (double)tot / nl,
           (double)tot / (p.nsteps * (g.tm / 16)), g.ti, g.tr, g.tq);
    return 0;
}
