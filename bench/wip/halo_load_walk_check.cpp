// Host check for bench/wip/halo_load.patch: the halo kernel's window walk before and after
// the patch gives every thread the same (shared-memory slot, source element or zero-fill)
// pairs, on random tile geometries. g++ -O2 bench/wip/halo_load_walk_check.cpp && ./a.out
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cstdint>
struct G { int ti, hr, hw, sub, swz, n, H, W, C, cc, lnch, stride, pad, nthreads; };
typedef std::pair<long long, long long> PR;  // (byte offset in buf, element offset in x or -1)
static int slot(int p, int j, int nch, int swz) { return p * nch + (j ^ ((p >> swz) & (nch - 1))); }
static void old_walk(const G &a, int tid, int i0, int r0, int q0, int c, std::vector<PR> &o) {
    const int nch = 1 << a.lnch, per = a.hw << a.lnch, lane = tid & 31;
    const int w0 = q0 * a.stride - a.pad;
    for (int row = tid >> 5; row < a.ti * a.hr; row += a.nthreads >> 5) {
        const int img = i0 + row / a.hr, h = r0 * a.stride - a.pad + row % a.hr * a.sub;
        const bool rin = img < a.n && h >= 0 && h < a.H;
        long long xr = (((long long)(rin ? img : 0) * a.H + (rin ? h : 0)) * a.W) * a.C + c * a.cc;
        for (int k = lane; k < per; k += 32) {
            const int xx = k >> a.lnch, j = k & (nch - 1), w = w0 + xx * a.sub;
            const bool in = rin && w >= 0 && w < a.W;
            o.push_back(PR((long long)slot(row * a.hw + xx, j, nch, a.swz) * 16, in ? xr + (long long)w * a.C + j * 8 : -1));
        }
    }
}
static void new_walk(const G &a, int tid, int i0, int r0, int q0, int c, std::vector<PR> &o) {
    const int lane = tid & 31, nch = 1 << a.lnch, j = lane & (nch - 1), step = 32 >> a.lnch;
    const int nwarp = a.nthreads >> 5, rows = a.ti * a.hr, dw = step * a.sub, doff = dw * a.C;
    const int w0 = q0 * a.stride - a.pad + (lane >> a.lnch) * a.sub, h0 = r0 * a.stride - a.pad;
    int row = tid >> 5, img = i0 + row / a.hr, yy = row % a.hr;
    for (; row < rows; row += nwarp) {
        const int h = h0 + yy * a.sub;
        const bool rin = img < a.n && h >= 0 && h < a.H;
        long long xr = (((long long)(rin ? img : 0) * a.H + (rin ? h : 0)) * a.W) * a.C + c * a.cc + j * 8;
        long long src = xr + (long long)w0 * a.C;
        int p = row * a.hw + (lane >> a.lnch), w = w0;
        long long dst = (long long)p * nch * 16;
        for (int xx = lane >> a.lnch; xx < a.hw; xx += step, p += step, w += dw, src += doff, dst += 512) {
            const bool in = rin && (unsigned)w < (unsigned)a.W;
            o.push_back(PR(dst + (j ^ ((p >> a.swz) & (nch - 1))) * 16, in ? src : -1));
        }
        for (yy += nwarp; yy >= a.hr; yy -= a.hr) img++;
    }
}
int main() {
    srand(7); int bad = 0, cases = 0;
    for (int t = 0; t < 20000; t++) {
        G a; a.lnch = rand() % 4; a.cc = 8 << a.lnch; a.C = a.cc * (1 + rand() % 4);
        a.stride = 1 + rand() % 2; a.sub = 1 + rand() % 2; a.pad = rand() % 2; a.swz = rand() % 3;
        a.ti = 1 + rand() % 3; a.hr = 1 + rand() % 12; a.hw = 1 + rand() % 40; a.n = 1 + rand() % 5;
        a.H = 1 + rand() % 33; a.W = 1 + rand() % 33; a.nthreads = 32 * (1 + rand() % 8);
        int i0 = rand() % (a.n + 1), r0 = rand() % (a.H + 2), q0 = rand() % (a.W + 2), c = rand() % (a.C / a.cc);
        for (int tid = 0; tid < a.nthreads; tid++) {
            std::vector<PR> x, y; old_walk(a, tid, i0, r0, q0, c, x); new_walk(a, tid, i0, r0, q0, c, y);
            std::sort(x.begin(), x.end()); std::sort(y.begin(), y.end()); cases++;
            if (x != y) { if (bad++ < 3) printf("differ: t %d tid %d lnch %d hw %d\n", t, tid, a.lnch, a.hw); }
        }
    }
    printf("%d thread walks compared, %d differ\n", cases, bad); return bad != 0;
}
