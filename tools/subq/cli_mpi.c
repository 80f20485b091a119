#include "cli_mpi.h"

#include <stdlib.h>
#include <time.h>

#include "cli.h"

#ifdef SUBQ_HAVE_MPI
#include <mpi.h>

/* Launched by mpirun: its environment says so (Open MPI, MPICH / PMI, PMIx). */
static int under_mpirun(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Wait for a nonblocking collective, at most timeout_s: 0, or -1 on timeout
 * or error. Open MPI moves a collective forward only inside MPI calls, so
 * the first second polls without pause (a 4 MB sum takes thousands of
 * calls; sleeping between them made it take seconds), then every
 * millisecond while a slow rank is awaited. */
static int wait_for(MPI_Request *req, double timeout_s) {
    const double start = now_s(), deadline = start + timeout_s;
    for (;;) {
        int done = 0;
        if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return -1;
        if (done) return 0;
        const double t = now_s();
        if (t > deadline) return -1; /* the request stays pending: the caller aborts the job */
        if (t - start > 1.0) {
            struct timespec ts = {0, 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
}

static int mpi_sum(void *user, double *x, size_t n) {
    cli_mpi *m = user;
    MPI_Request req;
    /* counts are ints: large arrays go in pieces */
    for (size_t off = 0; off < n; off += (size_t)1 << 28) {
        const int c = (int)(n - off < ((size_t)1 << 28) ? n - off : (size_t)1 << 28);
        if (MPI_Iallreduce(MPI_IN_PLACE, x + off, c, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req) != MPI_SUCCESS ||
            wait_for(&req, m->timeout_s))
            return -1;
    }
    return 0;
}

static int mpi_bcast(void *user, void *buf, size_t bytes) {
    cli_mpi *m = user;
    MPI_Request req;
    if (bytes > (size_t)1 << 30) return -1;
    if (MPI_Ibcast(buf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD, &req) != MPI_SUCCESS) return -1;
    return wait_for(&req, m->timeout_s);
}

int cli_mpi_available(void) { return 1; }

int cli_mpi_join(const char *cmd, cli_mpi *m, double timeout_s) {
    *m = (cli_mpi){.rank = 0, .size = 1, .timeout_s = timeout_s};
    if (!under_mpirun()) return 1;
    int provided = 0;
    /* only the main thread calls MPI; OpenMP and the pool compute beside it */
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return cli_error(cmd, "cannot join the MPI job (MPI_Init_thread failed)"), 0;
    m->joined = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &m->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &m->size);
    m->comm = (subq_train_comm){.rank = m->rank, .size = m->size, .user = m, .sum = mpi_sum, .bcast = mpi_bcast};
    return 1;
}

void cli_mpi_leave(cli_mpi *m, int failed) {
    if (!m->joined) return;
    if (failed && m->size > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Finalize();
    m->joined = 0;
}

#else

int cli_mpi_available(void) { return 0; }

int cli_mpi_join(const char *cmd, cli_mpi *m, double timeout_s) {
    *m = (cli_mpi){.rank = 0, .size = 1, .timeout_s = timeout_s};
    if (getenv("OMPI_COMM_WORLD_SIZE") && atoi(getenv("OMPI_COMM_WORLD_SIZE")) > 1)
        return cli_error(cmd, "this subq was built without MPI: install libopenmpi-dev and rebuild to train over mpirun"), 0;
    return 1;
}

void cli_mpi_leave(cli_mpi *m, int failed) { (void)m, (void)failed; }

#endif
