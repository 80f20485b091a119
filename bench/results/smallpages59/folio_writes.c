/* One-row writes into a file's page cache held in 2 MiB folios, against the same rows after
 * FALLOC_FL_ZERO_RANGE made their pages small (what kv_file_will_write does for a decode's slots).
 * A 512 MiB file in DIR (default /tmp) is reserved, read once as zeros through a MADV_HUGEPAGE mapping (2 MiB
 * folios, as kv_file.c's populate_huge), then:
 *   pwrite: 128 places 4 MiB apart get 30 rows of 136 bytes each (a q8_0 row), one pwrite a row; then fdatasync;
 *   store:  32 places get 16-byte stores through a shared mapping, 30 a place, then fdatasync, three times.
 * Prints the time a write, the fdatasync and the bytes the disk ($DEV, default vda) was sent.
 * Build: cc -O2 -o folio_writes folio_writes.c; run: ./folio_writes pwrite|store 0|1 (1: pages made small). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static long long disk_written(void) {
    char path[256];
    snprintf(path, sizeof path, "/sys/block/%s/stat", getenv("DEV") ? getenv("DEV") : "vda");
    long long a[7] = {0};
    FILE *f = fopen(path, "r");
    if (!f || fscanf(f, "%lld %lld %lld %lld %lld %lld %lld", a, a + 1, a + 2, a + 3, a + 4, a + 5, a + 6) != 7) a[6] = 0;
    if (f) fclose(f);
    return a[6] * 512;
}

int main(int argc, char **argv) {
    if (argc < 3) return fprintf(stderr, "usage: %s pwrite|store 0|1\n", argv[0]), 2;
    const int store = !strcmp(argv[1], "store"), small = atoi(argv[2]);
    const size_t bytes = (size_t)512 << 20, stride = 4 << 20;
    char path[512];
    snprintf(path, sizeof path, "%s/folio_writes.tmp", getenv("DIR") ? getenv("DIR") : "/tmp");
    unlink(path);
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    if (fd < 0 || posix_fallocate(fd, 0, bytes)) return perror(path), 1;
    void *p = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
    madvise(p, bytes, MADV_HUGEPAGE);
    madvise(p, bytes, MADV_POPULATE_READ);
    munmap(p, bytes);
    char *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    madvise(m, bytes, MADV_POPULATE_READ);
    const int places = store ? 32 : 128;
    if (small)
        for (int i = 0; i < places; i++)
            if (fallocate(fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, (off_t)i * stride + 4096, 1 << 20))
                perror("zero range");
    fdatasync(fd);
    char row[136];
    memset(row, 7, sizeof row);
    for (int round = 0; round < (store ? 3 : 1); round++) {
        const long long w0 = disk_written();
        double t = now();
        for (int r = 0; r < 30; r++)
            for (int i = 0; i < places; i++) {
                const size_t at = (size_t)i * stride + 4096 + (size_t)(round * 30 + r) * (store ? 16 : 136);
                if (store) memset(m + at, round + 1, 16);
                else if (pwrite(fd, row, sizeof row, (off_t)at) != (ssize_t)sizeof row) return perror("pwrite"), 1;
            }
        const double tw = now() - t;
        t = now();
        fdatasync(fd);
        printf("%s small=%d: %.2f us a write, fdatasync %.1f ms, disk %.1f MB\n", argv[1], small,
               tw / (30.0 * places) * 1e6, (now() - t) * 1e3, (disk_written() - w0) / 1e6);
    }
    unlink(path);
    return 0;
}
