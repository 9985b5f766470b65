// Tests of the one atomic writer (runtime/atomic.h) and the checksummed HDF5
// files (runtime/h5io.h): contents and no temporary after a write; outputs
// that are FIFOs, directories or in missing directories refused untouched;
// FIFO inputs refused without blocking; stale temporaries removed; a
// flipped, truncated or edited model file fails its checksum; a full disk
// (file size limit) leaves the previous file and no temporary.
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/atomic.h"
#include "runtime/model_io.h"
#include "tests/check.h"

// Makes a fresh temporary directory into dir.
static int dir_make(char *dir, size_t len) {
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, len, "%s/sc_atomic_XXXXXX", tmp);
    return mkdtemp(dir) ? 0 : -1;
}

// Counts the entries of dir whose name contains ".tmp.".
static int tmp_count(const char *dir) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "exit $(ls -a '%s' | grep -c '\\.tmp\\.')", dir);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// Reads a whole small file into buf; its length or -1.
static long slurp(const char *path, char *buf, size_t len) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    long n = (long)fread(buf, 1, len, f);
    fclose(f);
    return n;
}

// A write lands complete, with no temporary left.
static void test_write(tctx *t) {
    char dir[512], p[600], buf[64];
    CHECK(t, dir_make(dir, sizeof dir) == 0, "mkdtemp");
    snprintf(p, sizeof p, "%s/a.txt", dir);
    sc_err err = {{0}};
    CHECK(t, sc_atomic_write(p, "first", 5, &err) == 0, "%s", err.msg);
    CHECK(t, sc_atomic_write(p, "second", 6, &err) == 0, "%s", err.msg);
    long n = slurp(p, buf, sizeof buf);
    CHECK(t, n == 6 && !memcmp(buf, "second", 6), "content %ld bytes", n);
    CHECK(t, tmp_count(dir) == 0, "temporary left");
}

// FIFOs, directories and missing directories are refused and left alone.
static void test_refused_outputs(tctx *t) {
    char dir[512], p[600];
    CHECK(t, dir_make(dir, sizeof dir) == 0, "mkdtemp");
    sc_err err = {{0}};
    snprintf(p, sizeof p, "%s/fifo", dir);
    CHECK(t, mkfifo(p, 0600) == 0, "mkfifo");
    CHECK(t, sc_atomic_write(p, "x", 1, &err) != 0 && strstr(err.msg, "not a regular file"),
          "FIFO output: %s", err.msg);
    struct stat st;
    CHECK(t, stat(p, &st) == 0 && S_ISFIFO(st.st_mode), "FIFO replaced");
    CHECK(t, sc_output_check(dir, &err) != 0 && strstr(err.msg, "directory"), "dir: %s", err.msg);
    snprintf(p, sizeof p, "%s/nodir/x", dir);
    CHECK(t, sc_output_check(p, &err) != 0 && strstr(err.msg, "does not exist"), "%s", err.msg);
    CHECK(t, sc_output_check("/dev/null", &err) != 0 && strstr(err.msg, "not a regular file"),
          "/dev/null: %s", err.msg);
}

// A FIFO input is refused at once (opening it blocking would hang).
static void test_fifo_input(tctx *t) {
    char dir[512], p[600];
    CHECK(t, dir_make(dir, sizeof dir) == 0, "mkdtemp");
    snprintf(p, sizeof p, "%s/in", dir);
    CHECK(t, mkfifo(p, 0600) == 0, "mkfifo");
    sc_err err = {{0}};
    alarm(20);  // a regression hangs: fail by SIGALRM instead of forever
    int fd = sc_input_open(p, "model file", &err);
    alarm(0);
    CHECK(t, fd < 0 && strstr(err.msg, "model file is not a regular file"), "%s", err.msg);
}

// A temporary of a process that no longer exists is removed by the next write.
static void test_stale(tctx *t) {
    char dir[512], p[600], stale[700];
    CHECK(t, dir_make(dir, sizeof dir) == 0, "mkdtemp");
    snprintf(p, sizeof p, "%s/m.h5", dir);
    snprintf(stale, sizeof stale, "%s.tmp.99999999", p);
    FILE *f = fopen(stale, "w");
    CHECK(t, f && fclose(f) == 0, "create stale");
    sc_err err = {{0}};
    CHECK(t, sc_atomic_write(p, "x", 1, &err) == 0, "%s", err.msg);
    CHECK(t, access(stale, F_OK) != 0, "stale temporary still there");
}

// Saves a small model; 0 on success.
static int model_make(const char *path, sc_err *err) {
    net *nt = net_create("lenet", 3, 32, 32, 10, err);
    if (!nt) return -1;
    int rc = model_save(path, nt, NULL, err);
    net_free(nt);
    return rc;
}

// Flipped and truncated model files fail their checksum with one clear line.
static void test_checksum(tctx *t) {
    char dir[512], p[600], cmd[1400];
    CHECK(t, dir_make(dir, sizeof dir) == 0, "mkdtemp");
    snprintf(p, sizeof p, "%s/m.h5", dir);
    sc_err err = {{0}};
    CHECK(t, model_make(p, &err) == 0, "%s", err.msg);
    net *nt = model_load(p, NULL, &err);
    CHECK(t, nt != NULL, "good file: %s", err.msg);
    net_free(nt);
    snprintf(cmd, sizeof cmd, "printf 'Z' | dd of='%s' bs=1 seek=100000 conv=notrunc status=none", p);
    CHECK(t, system(cmd) == 0, "flip");
    CHECK(t, !model_load(p, NULL, &err) && strstr(err.msg, "checksum mismatch") &&
          strstr(err.msg, p), "flipped: %s", err.msg);
    CHECK(t, model_make(p, &err) == 0 && truncate(p, 4000) == 0, "truncate");
    CHECK(t, !model_load(p, NULL, &err) && strstr(err.msg, "damaged or truncated"),
          "truncated: %s", err.msg);
}

// A write beyond the file size limit (a full disk) fails cleanly: the old
// file stays, no temporary is left.
static void test_disk_full(tctx *t) {
    char dir[512], p[600], a[64];
    CHECK(t, dir_make(dir, sizeof dir) == 0, "mkdtemp");
    snprintf(p, sizeof p, "%s/m.txt", dir);
    sc_err err = {{0}};
    CHECK(t, sc_atomic_write(p, "previous", 8, &err) == 0, "%s", err.msg);
    struct rlimit old, lim = {4096, 4096};
    CHECK(t, getrlimit(RLIMIT_FSIZE, &old) == 0, "getrlimit");
    lim.rlim_max = old.rlim_max;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    CHECK(t, setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit");
    static char big[1 << 16];
    int rc = sc_atomic_write(p, big, sizeof big, &err);
    CHECK(t, setrlimit(RLIMIT_FSIZE, &old) == 0, "restore rlimit");
    signal(SIGXFSZ, prev);
    CHECK(t, rc != 0 && strstr(err.msg, p) && !strchr(err.msg, '\n'), "error: %s", err.msg);
    long n = slurp(p, a, sizeof a);
    CHECK(t, n == 8 && !memcmp(a, "previous", 8), "previous file changed (%ld bytes)", n);
    CHECK(t, tmp_count(dir) == 0, "temporary left");
}

int main(void) {
    tctx t = {.suite = "test_atomic"};
    RUN(&t, test_write);
    RUN(&t, test_refused_outputs);
    RUN(&t, test_fifo_input);
    RUN(&t, test_stale);
    RUN(&t, test_checksum);
    RUN(&t, test_disk_full);
    return check_finish(&t);
}
