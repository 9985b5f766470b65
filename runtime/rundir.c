// Run directories: creation with a timestamped name, the runs/latest link,
// and finding the previous step's output in the latest run.
#include "rundir.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

// --- paths ------------------------------------------------------------------

// Creates directory path and its missing parents.
int rundir_mkdirs(const char *path, sc_err *err) {
    char p[PATH_MAX];
    if (!path[0]) return sc_fail(err, "empty directory name");
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p)
        return sc_fail(err, "path too long (%s)", path);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0') continue;
        char c = *s;
        *s = '\0';
        struct stat st;
        if (mkdir(p, 0777) != 0) {
            int e = errno;
            if (stat(p, &st) != 0)
                return sc_fail(err, "cannot create directory (%s, %s)", p, strerror(e));
            if (!S_ISDIR(st.st_mode)) return sc_fail(err, "not a directory (%s)", p);
        }
        *s = c;
        if (c == '\0') break;
        while (s[1] == '/') s++;
    }
    return 0;
}

// Joins dir and name with one '/' into out.
int rundir_join(char *out, size_t outlen, const char *dir, const char *name, sc_err *err) {
    size_t n = strlen(dir);
    const char *sep = n && dir[n - 1] == '/' ? "" : "/";
    if (snprintf(out, outlen, "%s%s%s", dir, sep, name) >= (int)outlen)
        return sc_fail(err, "path too long (%s/%s)", dir, name);
    return 0;
}

// Copies the base name of path (trailing '/' ignored; drop_ext: without the
// extension) with characters other than [A-Za-z0-9._-] replaced by '_'.
static void rundir_part(const char *path, int drop_ext, char *out, size_t len) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    size_t m = n - b;
    if (drop_ext) {
        for (size_t i = m; i > 1; i--)
            if (path[b + i - 1] == '.') {
                m = i - 1;
                break;
            }
    }
    if (m >= len) m = len - 1;
    for (size_t i = 0; i < m; i++) {
        char c = path[b + i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        out[i] = ok ? c : '_';
    }
    out[m] = '\0';
    if (m == 0 || !strcmp(out, ".") || !strcmp(out, "..")) snprintf(out, len, "run");
}

// --- the latest link --------------------------------------------------------

// Points <root>/latest at name: a symlink under a temporary name, renamed
// over the old link so readers never see it missing.
static int rundir_link_latest(const char *root, const char *name, sc_err *err) {
    char tmp[PATH_MAX], link[PATH_MAX], base[64];
    snprintf(base, sizeof base, ".latest.tmp.%ld", (long)getpid());
    SC_TRY(rundir_join(tmp, sizeof tmp, root, base, err));
    SC_TRY(rundir_join(link, sizeof link, root, "latest", err));
    unlink(tmp);
    if (symlink(name, tmp) != 0)
        return sc_fail(err, "cannot create symlink (%s, %s)", tmp, strerror(errno));
    if (rename(tmp, link) != 0) {
        int e = errno;
        unlink(tmp);
        return sc_fail(err, "cannot update the latest-run link (%s, %s)", link, strerror(e));
    }
    return 0;
}

// Makes a new run directory and points <runs_root>/latest at it.
int rundir_create(const char *runs_root, const char *dataset, const char *model, char *out,
                  size_t outlen, sc_err *err) {
    char ds[64], md[64], stamp[32], name[200], path[PATH_MAX];
    SC_TRY(rundir_mkdirs(runs_root, err));
    rundir_part(dataset ? dataset : "data", 0, ds, sizeof ds);
    rundir_part(model ? model : "model", 1, md, sizeof md);
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    for (int n = 1; n < 1000; n++) {
        if (n == 1) snprintf(name, sizeof name, "%s-%s-%s", ds, md, stamp);
        else snprintf(name, sizeof name, "%s-%s-%s-%d", ds, md, stamp, n);
        SC_TRY(rundir_join(path, sizeof path, runs_root, name, err));
        if (mkdir(path, 0777) == 0) {
            SC_TRY(rundir_link_latest(runs_root, name, err));
            if (snprintf(out, outlen, "%s", path) >= (int)outlen)
                return sc_fail(err, "path too long (%s)", path);
            return 0;
        }
        if (errno != EEXIST)
            return sc_fail(err, "cannot create run directory (%s, %s)", path, strerror(errno));
    }
    return sc_fail(err, "too many runs with the same name (%s/%s-%s-%s)", runs_root, ds, md, stamp);
}

// Resolves <runs_root>/latest to the run directory it points at.
int rundir_latest(const char *runs_root, char *out, size_t outlen, sc_err *err) {
    char link[PATH_MAX], target[PATH_MAX];
    SC_TRY(rundir_join(link, sizeof link, runs_root, "latest", err));
    size_t n = strlen(runs_root);
    const char *slash = n && runs_root[n - 1] == '/' ? "" : "/";
    struct stat st;
    if (lstat(link, &st) != 0)
        return sc_fail(err, "no previous run in %s%s (run train first)", runs_root, slash);
    if (S_ISLNK(st.st_mode)) {
        ssize_t k = readlink(link, target, sizeof target - 1);
        if (k < 0) return sc_fail(err, "cannot read link (%s, %s)", link, strerror(errno));
        target[k] = '\0';
        if (target[0] == '/') {
            if (snprintf(out, outlen, "%s", target) >= (int)outlen)
                return sc_fail(err, "path too long (%s)", target);
        } else {
            SC_TRY(rundir_join(out, outlen, runs_root, target, err));
        }
    } else if (snprintf(out, outlen, "%s", link) >= (int)outlen) {
        return sc_fail(err, "path too long (%s)", link);
    }
    if (stat(out, &st) != 0 || !S_ISDIR(st.st_mode))
        return sc_fail(err, "%s points to a missing run directory (%s)", link, out);
    return 0;
}

// Finds the first existing candidate file in the latest run directory.
int rundir_find_input(const char *runs_root, const char *const *candidates, char *out,
                      size_t outlen, sc_err *err) {
    char dir[PATH_MAX], names[400] = "";
    SC_TRY(rundir_latest(runs_root, dir, sizeof dir, err));
    size_t used = 0;
    for (int i = 0; candidates[i]; i++) {
        struct stat st;
        SC_TRY(rundir_join(out, outlen, dir, candidates[i], err));
        if (stat(out, &st) == 0 && S_ISREG(st.st_mode)) return 0;
        const char *sep = !i ? "" : candidates[i + 1] ? ", " : " or ";
        if (used < sizeof names)
            used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", sep, candidates[i]);
    }
    if (out && outlen) out[0] = '\0';
    return sc_fail(err, "no %s in the latest run (%s)", names[0] ? names : "input file", dir);
}
