/* Preloaded into a daemon (LD_PRELOAD) to stand in for storage whose flushes are slow, as
 * an SD card's or an eMMC's are: every fdatasync and fsync takes SLOW_SYNC_US microseconds
 * (default 5000) longer than the disk's own. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

typedef int (*flush_fn)(int);

/* The C library's `name` (looked up once into `real`) on `fd`, then the added time. */
static int flush_slowly(const char *name, flush_fn *real, int fd) {
    if (!*real) *real = (flush_fn)dlsym(RTLD_NEXT, name);
    int result = (*real)(fd);
    const char *text = getenv("SLOW_SYNC_US");
    usleep(text ? (useconds_t)atoi(text) : 5000);
    return result;
}

int fdatasync(int fd) {
    static flush_fn real;
    return flush_slowly("fdatasync", &real, fd);
}

int fsync(int fd) {
    static flush_fn real;
    return flush_slowly("fsync", &real, fd);
}
