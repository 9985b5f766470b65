// The population of the pruning search spread over the ranks of a run
// (prune/dist.h). Every rank holds the small fields of every solution
// (sparsities, genome, accuracies, counters, data-stream position) and keeps
// them equal to the other ranks' by running the same code on the same
// values; a solution's arrays (parameters, masks, momentum, BN buffers and
// its snapshot) are valid on its owner, owner[i], the rank that trains it.
// This file assigns solutions to ranks and moves arrays between them. With
// d = NULL or one rank every call is local (and moves nothing).
#ifndef SC_PRUNE_POP_DIST_H
#define SC_PRUNE_POP_DIST_H

#include "prune/dist.h"
#include "prune/pop.h"
#include "runtime/error.h"
#include "runtime/net.h"

// The home ranks of n solutions over `size` ranks: contiguous shares,
// owner[i] = i * size / n (the owners at the start and after a resume).
void prune_pop_home(int *owner, int n, int size);

// Spreads the solutions flagged in active (n) over `size` ranks so that
// the counts differ by at most one, keeping every solution on its current
// owner where that balance allows (the ranks that hold most keep the extra
// ones); the others go, in index order, to the ranks with room. want (n)
// receives the new owners (inactive solutions keep theirs). Returns the
// number of solutions that change rank.
int prune_pop_assign(const int *owner, const int *active, int n, int size, int *want);

// Moves the arrays of every solution i with want[i] != owner[i] from
// owner[i] to want[i]; owner becomes want. Collective.
int prune_pop_move(dist *d, prune_pop *p, int *owner, const int *want, sc_err *err);

// Carries out the logged array work (prune_oplog) in log order: local
// copies and rewinds on the owner, sends and receives where source and
// destination live on different ranks; then empties the log. Collective.
int prune_pop_replay(dist *d, prune_pop *p, const int *owner, prune_oplog *log, sc_err *err);

// Copies the arrays of solution i from its owner to rank `to` (which then
// holds a valid copy; the owner stays). Collective.
int prune_pop_fetch(dist *d, prune_pop *p, const int *owner, int i, int to, sc_err *err);

// Copies the arrays of every solution to rank 0 (for the state file). Collective.
int prune_pop_gather(dist *d, prune_pop *p, const int *owner, sc_err *err);

// Rank 0's population (every field but the arrays) and settings text to
// every rank: on the others *p receives a new population for nt's sizes
// (arrays zero) and *config a copy of the text (caller frees). Collective.
int prune_pop_share(dist *d, prune_pop **p, const net *nt, char **config, sc_err *err);

// Sends the arrays of every solution from rank 0 to its owner. Collective.
int prune_pop_scatter(dist *d, prune_pop *p, const int *owner, sc_err *err);

#endif
