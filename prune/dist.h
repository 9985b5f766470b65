// A small communicator for spreading one run over several processes
// (ranks). With MPI compiled in (prune/dist_mpi.c) and the process started
// by mpirun, the ranks are those of MPI_COMM_WORLD; otherwise (no mpirun, or
// prune/dist_nompi.c in a build without MPI) there is one process, rank 0.
// Every function also takes d = NULL as that single process, so code and
// tests that do not spread work pass NULL.
//
// Conventions of a run spread over ranks:
//   - every rank runs the same code on the same inputs; collectives (bcast,
//     agree) must be reached by all ranks in the same order;
//   - rank 0 alone prints, writes files and reports errors: dist_init sends
//     the stdout and stderr of the other ranks to /dev/null;
//   - an error on any rank reaches all of them at the next dist_agree, so
//     that every rank leaves the run on the same path and rank 0 prints the
//     one error line;
//   - when a rank dies, mpirun stops the job with SIGTERM; rank 0 then prints
//     the line set by dist_set_epitaph (where the last state file is).
#ifndef SC_PRUNE_DIST_H
#define SC_PRUNE_DIST_H

#include <stddef.h>

#include "runtime/error.h"

typedef struct dist dist;

// Starts the communicator: MPI_Init when MPI is compiled in and the process
// was started by mpirun (else a single process); silences ranks other than
// 0; when OMP_NUM_THREADS is unset, shares the machine's cores among the
// ranks on it. `tool` prefixes the epitaph line. Fails (one line in err)
// when MPI cannot start, or when mpirun started several copies of a build
// without MPI. *out is NULL after a failure.
int dist_init(dist **out, const char *tool, int *argc, char ***argv, sc_err *err);
// Ends the communicator (MPI_Finalize); NULL is fine.
void dist_free(dist *d);

// This process's rank in [0, size).
int dist_rank(const dist *d);
// Number of ranks.
int dist_size(const dist *d);
// Rank among the ranks on the same machine (picks the GPU), and their number.
int dist_local_rank(const dist *d);
int dist_local_size(const dist *d);
// 1 when this build can spread over ranks (MPI compiled in), else 0.
int dist_compiled(void);

// Copies `bytes` bytes from root's buf into every other rank's buf.
int dist_bcast(dist *d, void *buf, size_t bytes, int root, sc_err *err);
// Point-to-point: sends buf to rank `to` / receives into buf from rank
// `from`; the two sides must name the same size.
int dist_send(dist *d, const void *buf, size_t bytes, int to, sc_err *err);
int dist_recv(dist *d, void *buf, size_t bytes, int from, sc_err *err);

// Agreement on a status: every rank passes its own rc (0 or -1) with its
// err. Returns 0 on every rank when every rc was 0; else -1 on every rank,
// with err holding the message of the lowest failing rank ("rank R: ..."
// when that is not rank 0).
int dist_agree(dist *d, int rc, sc_err *err);

// Sets the line (after "tool: ") that rank 0 prints when mpirun stops the
// job with SIGTERM (a rank died or the job was killed). No-op elsewhere.
void dist_set_epitaph(dist *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
