// The communicator of prune/dist.h over MPI (built only when mpicc exists).
#include "dist.h"

#include <fcntl.h>
#include <mpi.h>
#include <omp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Largest piece of one MPI message (counts are ints).
#define DIST_CHUNK ((size_t)1 << 30)

struct dist {
    int mpi;                 // 1 when MPI_Init ran (started by mpirun)
    int rank, size;          // in MPI_COMM_WORLD
    int local_rank, local_size;  // among the ranks on this machine
    int err_fd;              // the original stderr (ranks > 0 write theirs to /dev/null)
};

// --- the epitaph ----------------------------------------------------------------

// The line rank 0 prints when mpirun ends the job with SIGTERM. A signal
// handler can only reach static storage, so this is the module's one mutable
// global: written by dist_set_epitaph with SIGTERM blocked, read by the handler.
static struct {
    char line[1024];
    size_t head, len;  // length of the "tool: " prefix, of the whole line
    int fd;
} epitaph;

// SIGTERM on rank 0: prints the epitaph and exits (async-signal-safe calls only).
static void epitaph_handler(int sig) {
    (void)sig;
    if (epitaph.len) {
        ssize_t w = write(epitaph.fd, epitaph.line, epitaph.len);
        (void)w;
    }
    _exit(1);
}

// Sets the epitaph line (rank 0 of a run of several ranks only).
void dist_set_epitaph(dist *d, const char *fmt, ...) {
    if (!d || !d->mpi || d->rank != 0 || d->size < 2) return;
    char body[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    sigset_t term, old;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_BLOCK, &term, &old);
    size_t n = epitaph.head;
    snprintf(epitaph.line + n, sizeof epitaph.line - n, "%s\n", body);
    epitaph.len = strlen(epitaph.line);
    sigprocmask(SIG_SETMASK, &old, NULL);
}

// Installs the SIGTERM handler of rank 0 with a first epitaph.
static void epitaph_install(dist *d, const char *tool) {
    snprintf(epitaph.line, 64, "%s: ", tool);
    epitaph.head = strlen(epitaph.line);
    epitaph.fd = d->err_fd;
    dist_set_epitaph(d, "the run was stopped by mpirun: a rank died or the job was killed "
                        "(no state file saved yet)");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = epitaph_handler;
    sigaction(SIGTERM, &sa, NULL);
}

// --- errors -------------------------------------------------------------------

// Fills err with a failed MPI call, its error string, file and line.
static int mpi_fail(sc_err *err, const char *expr, int code, const char *file, int line) {
    char what[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(code, what, &len);
    return sc_fail(err, "%.200s failed: %s (%s:%d)", expr, what, file, line);
}

// Returns -1 from the caller when an MPI call does not succeed.
#define mpiCheck(err, call)                                                           \
    do {                                                                              \
        int sc_m_ = (call);                                                           \
        if (sc_m_ != MPI_SUCCESS) return mpi_fail((err), #call, sc_m_, __FILE__, __LINE__); \
    } while (0)

// --- start and end --------------------------------------------------------------

// True when a process manager (mpirun and friends) started this process.
static int launched_by_mpirun(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", NULL};
    for (int i = 0; vars[i]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

// Sends this rank's stdout and stderr to /dev/null, keeping the old stderr.
static void silence(dist *d) {
    fflush(stdout);
    fflush(stderr);
    d->err_fd = dup(2);
    int nul = open("/dev/null", O_WRONLY);
    if (nul < 0) return;
    dup2(nul, 1);
    dup2(nul, 2);
    close(nul);
}

// Rank, size and the ranks sharing this machine.
static int ranks_read(dist *d, sc_err *err) {
    MPI_Comm local;
    mpiCheck(err, MPI_Comm_rank(MPI_COMM_WORLD, &d->rank));
    mpiCheck(err, MPI_Comm_size(MPI_COMM_WORLD, &d->size));
    mpiCheck(err, MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank,
                                      MPI_INFO_NULL, &local));
    mpiCheck(err, MPI_Comm_rank(local, &d->local_rank));
    mpiCheck(err, MPI_Comm_size(local, &d->local_size));
    mpiCheck(err, MPI_Comm_free(&local));
    return 0;
}

// Starts MPI under mpirun, else a single process.
int dist_init(dist **out, const char *tool, int *argc, char ***argv, sc_err *err) {
    *out = NULL;
    dist *d = calloc(1, sizeof *d);
    if (!d) return sc_fail(err, "out of memory");
    d->size = d->local_size = 1;
    d->err_fd = 2;
    if (launched_by_mpirun()) {
        if (MPI_Init(argc, argv) != MPI_SUCCESS) {
            free(d);
            return sc_fail(err, "MPI_Init failed (started by mpirun)");
        }
        d->mpi = 1;
        if (ranks_read(d, err)) {
            dist_free(d);
            return -1;
        }
    }
    if (d->rank != 0) silence(d);
    if (d->rank == 0 && d->size > 1) epitaph_install(d, tool);
    if (d->local_size > 1 && !getenv("OMP_NUM_THREADS")) {
        int t = omp_get_num_procs() / d->local_size;
        omp_set_num_threads(t > 1 ? t : 1);
    }
    *out = d;
    return 0;
}

// Finalizes MPI and frees d. The epitaph goes first (the run is over), then
// every rank waits for the others: mpirun stops the job as soon as one rank
// exits with an error status, so nobody leaves before rank 0 has reported.
void dist_free(dist *d) {
    if (!d) return;
    if (d->mpi && d->rank == 0 && d->size > 1) signal(SIGTERM, SIG_DFL);
    if (d->mpi) {
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Finalize();
    }
    if (d->err_fd != 2) close(d->err_fd);
    free(d);
}

// --- queries --------------------------------------------------------------------

// This process's rank.
int dist_rank(const dist *d) { return d ? d->rank : 0; }
// Number of ranks.
int dist_size(const dist *d) { return d ? d->size : 1; }
// Rank among the ranks on this machine.
int dist_local_rank(const dist *d) { return d ? d->local_rank : 0; }
// Number of ranks on this machine.
int dist_local_size(const dist *d) { return d ? d->local_size : 1; }
// Whether MPI is compiled in.
int dist_compiled(void) { return 1; }

// True when d spans more than one rank.
static int spread(const dist *d) { return d && d->mpi && d->size > 1; }

// --- moving bytes -----------------------------------------------------------------

// Broadcast in pieces of at most DIST_CHUNK bytes.
int dist_bcast(dist *d, void *buf, size_t bytes, int root, sc_err *err) {
    if (!spread(d)) return 0;
    for (size_t off = 0; off < bytes; off += DIST_CHUNK) {
        size_t n = bytes - off < DIST_CHUNK ? bytes - off : DIST_CHUNK;
        mpiCheck(err, MPI_Bcast((char *)buf + off, (int)n, MPI_BYTE, root, MPI_COMM_WORLD));
    }
    return 0;
}

// Blocking send in pieces.
int dist_send(dist *d, const void *buf, size_t bytes, int to, sc_err *err) {
    if (!spread(d)) return sc_fail(err, "send to rank %d in a single process", to);
    for (size_t off = 0; off < bytes; off += DIST_CHUNK) {
        size_t n = bytes - off < DIST_CHUNK ? bytes - off : DIST_CHUNK;
        mpiCheck(err, MPI_Send((const char *)buf + off, (int)n, MPI_BYTE, to, 0, MPI_COMM_WORLD));
    }
    return 0;
}

// Blocking receive in pieces; fails when the sender sent another size.
int dist_recv(dist *d, void *buf, size_t bytes, int from, sc_err *err) {
    if (!spread(d)) return sc_fail(err, "receive from rank %d in a single process", from);
    for (size_t off = 0; off < bytes; off += DIST_CHUNK) {
        size_t n = bytes - off < DIST_CHUNK ? bytes - off : DIST_CHUNK;
        MPI_Status st;
        int got = 0;
        mpiCheck(err, MPI_Recv((char *)buf + off, (int)n, MPI_BYTE, from, 0, MPI_COMM_WORLD, &st));
        mpiCheck(err, MPI_Get_count(&st, MPI_BYTE, &got));
        if ((size_t)got != n)
            return sc_fail(err, "rank %d sent %d bytes, expected %zu", from, got, n);
    }
    return 0;
}

// The lowest failing rank's message on every rank, or 0 everywhere.
int dist_agree(dist *d, int rc, sc_err *err) {
    if (!spread(d)) return rc ? -1 : 0;
    int mine = rc ? d->rank : d->size, first = d->size;
    mpiCheck(err, MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first == d->size) return 0;
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", d->rank == first ? err->msg : "");
    mpiCheck(err, MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, first, MPI_COMM_WORLD));
    if (first == 0) return sc_fail(err, "%s", msg);
    return sc_fail(err, "rank %d: %s", first, msg);
}
