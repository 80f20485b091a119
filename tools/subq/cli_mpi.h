/* Data-parallel training across processes with MPI (Open MPI from Debian):
 * when subq runs under mpirun, train-search and train-phi join the job and
 * hand the trainer a subq_train_comm whose sums and broadcasts are MPI
 * collectives. A collective that does not complete within the timeout
 * (a rank died, hangs or was never started) fails, and the run ends with an
 * error on every rank instead of waiting forever. Builds without MPI train
 * alone, as before. */
#ifndef SUBQ_CLI_MPI_H
#define SUBQ_CLI_MPI_H

#include "subq_lab.h"

typedef struct cli_mpi {
    int joined;                 /* running under mpirun, MPI initialised */
    int rank, size;
    double timeout_s;           /* longest wait for the other ranks in one collective */
    subq_train_comm comm;
} cli_mpi;

/* Join the MPI job this process was started in, if any (1), else stay
 * alone (1, joined = 0); 0 after a one-line error. */
int cli_mpi_join(const char *cmd, cli_mpi *m, double timeout_s);
/* Leave the job: finalise, or (failed) abort it so that every rank ends now. */
void cli_mpi_leave(cli_mpi *m, int failed);
/* 1 when this build can train over MPI. */
int cli_mpi_available(void);

#endif
