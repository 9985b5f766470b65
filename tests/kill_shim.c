// Test-only LD_PRELOAD shim (tests/cli_kill.sh compiles it; never linked into
// a tool): kills the process with SIGKILL in the middle of an atomic write
// (runtime/atomic.h), to show that a killed write leaves the previous file.
// SC_KILL_PATH=SUFFIX picks the writes whose target ends in SUFFIX;
// SC_KILL_AT=N kills at the Nth such write; SC_KILL_WHEN=data kills after
// the first block of data reaches the temporary (HDF5 writes, through
// pwrite/write), SC_KILL_WHEN=rename (default) just before the temporary is
// renamed over the target (it is complete and fsynced).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

// True when name (a temporary "<target>.tmp.<pid>" or a target) is watched.
static int watched(const char *name, int is_tmp) {
    const char *suffix = getenv("SC_KILL_PATH");
    if (!suffix || !name) return 0;
    char target[4096];
    snprintf(target, sizeof target, "%s", name);
    if (is_tmp) {
        char *t = strstr(target, ".tmp.");
        if (!t) return 0;
        *t = '\0';
    }
    size_t n = strlen(target), k = strlen(suffix);
    return n >= k && !strcmp(target + n - k, suffix);
}

// Counts one event of kind `when` and kills the process at the Nth.
static void maybe_die(const char *when) {
    static int count;
    const char *w = getenv("SC_KILL_WHEN"), *at = getenv("SC_KILL_AT");
    if (strcmp(w ? w : "rename", when)) return;
    if (++count == (at ? atoi(at) : 1)) raise(SIGKILL);
}

// The file name behind descriptor fd ("" when unknown).
static void fd_name(int fd, char *buf, size_t len) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, buf, len - 1);
    buf[n > 0 ? n : 0] = '\0';
}

// Kills after the first data block written to a watched temporary (one count
// per temporary, told apart by its inode: every write makes a new one).
static void data_written(int fd) {
    static dev_t last_dev;
    static ino_t last_ino;
    char name[4096];
    struct stat st;
    fd_name(fd, name, sizeof name);
    if (!watched(name, 1) || fstat(fd, &st) != 0) return;
    if (st.st_dev == last_dev && st.st_ino == last_ino) return;
    last_dev = st.st_dev, last_ino = st.st_ino;
    maybe_die("data");
}

int rename(const char *from, const char *to) {
    int (*real)(const char *, const char *) = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    if (watched(from, 1) && watched(to, 0)) maybe_die("rename");
    return real(from, to);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) {
    ssize_t (*real)(int, const void *, size_t, off_t) =
        (ssize_t (*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite64");
    ssize_t r = real(fd, buf, n, off);
    data_written(fd);
    return r;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    ssize_t (*real)(int, const void *, size_t, off_t) =
        (ssize_t (*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    ssize_t r = real(fd, buf, n, off);
    data_written(fd);
    return r;
}

ssize_t write(int fd, const void *buf, size_t n) {
    ssize_t (*real)(int, const void *, size_t) = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    ssize_t r = real(fd, buf, n);
    data_written(fd);
    return r;
}
