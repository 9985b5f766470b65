// The communicator of prune/dist.h in a build without MPI: always one
// process. When mpirun started several copies anyway, each would run the
// whole job and write the same files, so dist_init refuses (rank 0 says so).
#include "dist.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct dist {
    int unused;
};

// Ranks mpirun (or another launcher) says it started, and this one's rank.
static void launcher_ranks(int *size, int *rank) {
    const char *sz = getenv("OMPI_COMM_WORLD_SIZE"), *rk = getenv("OMPI_COMM_WORLD_RANK");
    if (!sz) sz = getenv("PMI_SIZE"), rk = getenv("PMI_RANK");
    *size = sz ? atoi(sz) : 1;
    *rank = rk ? atoi(rk) : 0;
}

// A single process; fails under mpirun with more than one rank.
int dist_init(dist **out, const char *tool, int *argc, char ***argv, sc_err *err) {
    (void)tool, (void)argc, (void)argv;
    *out = NULL;
    int size, rank;
    launcher_ranks(&size, &rank);
    if (size > 1) {
        if (rank != 0) {  // one error line for the whole job
            int nul = open("/dev/null", O_WRONLY);
            if (nul >= 0) dup2(nul, 2), dup2(nul, 1), close(nul);
        }
        return sc_fail(err, "started by mpirun with %d ranks, but this build has no MPI "
                       "(install libopenmpi-dev and rebuild)", size);
    }
    *out = calloc(1, sizeof **out);
    return *out ? 0 : sc_fail(err, "out of memory");
}

// Frees d.
void dist_free(dist *d) { free(d); }

// This process's rank.
int dist_rank(const dist *d) { return (void)d, 0; }
// Number of ranks.
int dist_size(const dist *d) { return (void)d, 1; }
// Rank among the ranks on this machine.
int dist_local_rank(const dist *d) { return (void)d, 0; }
// Number of ranks on this machine.
int dist_local_size(const dist *d) { return (void)d, 1; }
// Whether MPI is compiled in.
int dist_compiled(void) { return 0; }

// Nothing to copy in a single process.
int dist_bcast(dist *d, void *buf, size_t bytes, int root, sc_err *err) {
    (void)d, (void)buf, (void)bytes, (void)err;
    return root == 0 ? 0 : sc_fail(err, "broadcast from rank %d in a single process", root);
}

// There is no other rank to send to.
int dist_send(dist *d, const void *buf, size_t bytes, int to, sc_err *err) {
    (void)d, (void)buf, (void)bytes;
    return sc_fail(err, "send to rank %d in a single process", to);
}

// There is no other rank to receive from.
int dist_recv(dist *d, void *buf, size_t bytes, int from, sc_err *err) {
    (void)d, (void)buf, (void)bytes;
    return sc_fail(err, "receive from rank %d in a single process", from);
}

// One process agrees with itself.
int dist_agree(dist *d, int rc, sc_err *err) {
    (void)d, (void)err;
    return rc ? -1 : 0;
}

// No mpirun, no epitaph.
void dist_set_epitaph(dist *d, const char *fmt, ...) { (void)d, (void)fmt; }
