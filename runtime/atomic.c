// Atomic file replacement shared by every writer (see runtime/atomic.h).
#include "atomic.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

// --- checks -----------------------------------------------------------------

// Splits path into its directory (dir) and base name (base).
static int atomic_split(const char *path, char *dir, size_t dlen, const char **base,
                        sc_err *err) {
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 0;
    if (!path[0]) return sc_fail(err, "empty output file name");
    if (n >= dlen) return sc_fail(err, "path too long (%s)", path);
    if (!slash) snprintf(dir, dlen, ".");
    else if (n == 0) snprintf(dir, dlen, "/");
    else snprintf(dir, dlen, "%.*s", (int)n, path);
    *base = slash ? slash + 1 : path;
    if (!**base) return sc_fail(err, "output names a directory (%s)", path);
    return 0;
}

// Fails unless dir is an existing, writable directory.
static int atomic_dir_check(const char *dir, const char *path, sc_err *err) {
    struct stat st;
    if (stat(dir, &st) != 0)
        return sc_fail(err, "output directory does not exist (%s, %s)", dir, path);
    if (!S_ISDIR(st.st_mode)) return sc_fail(err, "not a directory (%s, %s)", dir, path);
    if (access(dir, W_OK | X_OK) != 0)
        return sc_fail(err, "output directory not writable (%s, %s)", dir, strerror(errno));
    return 0;
}

// Fails when path exists and is not a regular file (never replaced).
static int atomic_target_check(const char *path, sc_err *err) {
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT) return 0;
        return sc_fail(err, "cannot write (%s, %s)", path, strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) return sc_fail(err, "output is a directory (%s)", path);
    if (!S_ISREG(st.st_mode))
        return sc_fail(err, "output exists and is not a regular file, not replacing it (%s)",
                       path);
    return 0;
}

// Checks that path can be written without writing anything.
int sc_output_check(const char *path, sc_err *err) {
    char dir[PATH_MAX];
    const char *base;
    SC_TRY(atomic_split(path, dir, sizeof dir, &base, err));
    SC_TRY(atomic_target_check(path, err));
    return atomic_dir_check(dir, path, err);
}

// --- stale temporaries ------------------------------------------------------

// Says whether name is "<base>.tmp.<pid>" of a process that no longer exists.
static int atomic_is_stale(const char *name, const char *base) {
    size_t n = strlen(base);
    if (strncmp(name, base, n) != 0 || strncmp(name + n, ".tmp.", 5) != 0) return 0;
    const char *digits = name + n + 5;
    char *end;
    long pid = strtol(digits, &end, 10);
    if (end == digits || *end != '\0' || pid <= 0) return 0;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

// Removes temporaries of base in dir left by killed writers (best effort).
static void atomic_clean_stale(const char *dir, const char *base) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!atomic_is_stale(e->d_name, base)) continue;
        char p[PATH_MAX];
        if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < (int)sizeof p) unlink(p);
    }
    closedir(d);
}

// --- writing ----------------------------------------------------------------

// Flushes a file or directory to disk.
int sc_fsync_path(const char *path, int flags, sc_err *err) {
    int fd = open(path, O_RDONLY | flags);
    if (fd < 0) return sc_fail(err, "cannot open for fsync (%s, %s)", path, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0 && e != EINVAL) return sc_fail(err, "fsync failed (%s, %s)", path, strerror(e));
    return 0;
}

// Checks path and prepares the temporary name; removes stale temporaries.
int sc_atomic_begin(sc_atomic *a, const char *path, sc_err *err) {
    const char *base;
    if (snprintf(a->path, sizeof a->path, "%s", path) >= (int)sizeof a->path)
        return sc_fail(err, "path too long (%s)", path);
    SC_TRY(atomic_split(path, a->dir, sizeof a->dir, &base, err));
    if (snprintf(a->tmp, sizeof a->tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof a->tmp)
        return sc_fail(err, "path too long (%s)", path);
    SC_TRY(atomic_target_check(path, err));
    SC_TRY(atomic_dir_check(a->dir, path, err));
    atomic_clean_stale(a->dir, base);
    return 0;
}

// fsync tmp, rename it over path, fsync dir; tmp removed on any failure.
int sc_atomic_end(sc_atomic *a, int rc, sc_err *err) {
    if (rc == 0) rc = sc_fsync_path(a->tmp, 0, err);
    if (rc == 0) rc = atomic_target_check(a->path, err);
    if (rc == 0 && rename(a->tmp, a->path) != 0)
        rc = sc_fail(err, "cannot rename temporary file (%s, %s)", a->path, strerror(errno));
    if (rc != 0) {
        unlink(a->tmp);
        return -1;
    }
    return sc_fsync_path(a->dir, O_DIRECTORY, err);
}

// Opens the temporary file with stdio.
FILE *sc_atomic_fopen(sc_atomic *a, const char *mode, sc_err *err) {
    FILE *f = fopen(a->tmp, mode);
    if (!f) sc_fail(err, "cannot write (%s, %s)", a->path, strerror(errno));
    return f;
}

// Closes the stdio stream, checking every buffered write, then ends the write.
int sc_atomic_fclose(sc_atomic *a, FILE *f, int rc, sc_err *err) {
    int e = 0;
    if (fflush(f) != 0 || ferror(f)) e = errno ? errno : EIO;
    if (fclose(f) != 0 && !e) e = errno ? errno : EIO;
    if (rc == 0 && e) rc = sc_fail(err, "cannot write (%s, %s)", a->path, strerror(e));
    return sc_atomic_end(a, rc, err);
}

// Writes len bytes to path atomically.
int sc_atomic_write(const char *path, const void *data, size_t len, sc_err *err) {
    sc_atomic a;
    SC_TRY(sc_atomic_begin(&a, path, err));
    FILE *f = sc_atomic_fopen(&a, "wb", err);
    if (!f) return -1;
    errno = 0;
    int rc = len && fwrite(data, 1, len, f) != len
                 ? sc_fail(err, "cannot write (%s, %s)", path, strerror(errno ? errno : EIO))
                 : 0;
    return sc_atomic_fclose(&a, f, rc, err);
}

// --- inputs -----------------------------------------------------------------

// Opens path non-blocking and keeps it only when it is a regular file.
int sc_input_open(const char *path, const char *what, sc_err *err) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return sc_fail(err, "cannot read %s (%s, %s)", what, path, strerror(errno));
    struct stat st;
    int e = fstat(fd, &st) != 0 ? errno : 0;
    if (e || !S_ISREG(st.st_mode)) {
        close(fd);
        if (e) return sc_fail(err, "cannot read %s (%s, %s)", what, path, strerror(e));
        if (S_ISDIR(st.st_mode)) return sc_fail(err, "%s is a directory (%s)", what, path);
        return sc_fail(err, "%s is not a regular file (%s)", what, path);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        e = errno;
        close(fd);
        return sc_fail(err, "cannot read %s (%s, %s)", what, path, strerror(e));
    }
    return fd;
}

// Opens a checked regular input file as a stdio stream.
FILE *sc_input_fopen(const char *path, const char *what, sc_err *err) {
    int fd = sc_input_open(path, what, err);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        sc_fail(err, "cannot read %s (%s, %s)", what, path, strerror(errno));
        close(fd);
    }
    return f;
}

// CRC-32 and length of fd's bytes from offset `from` to the end.
int sc_fd_crc32(int fd, long long from, const char *path, uint32_t *crc, unsigned long long *len, sc_err *err) {
    static const size_t chunk = 1u << 20;
    unsigned char *buf = malloc(chunk);
    if (!buf) return sc_fail(err, "out of memory (%s)", path);
    uLong c = crc32(0L, Z_NULL, 0);
    off_t off = (off_t)from;
    ssize_t n;
    while ((n = pread(fd, buf, chunk, off)) > 0) {
        c = crc32(c, buf, (uInt)n);
        off += n;
    }
    int e = errno;
    free(buf);
    if (n < 0) return sc_fail(err, "cannot read (%s, %s)", path, strerror(e));
    *crc = (uint32_t)c;
    *len = (unsigned long long)(off - (off_t)from);
    return 0;
}
