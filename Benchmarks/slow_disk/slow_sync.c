/* Preloaded into a daemon (LD_PRELOAD) to stand in for storage whose flushes are slow, as
 * an SD card's or an eMMC's are: every fdatasync and fsync takes SLOW_SYNC_US microseconds
 * (default 5000) longer than the disk's own. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

static void linger(void) {
    const char *text = getenv("SLOW_SYNC_US");
    usleep(text ? (useconds_t)atoi(text) : 5000);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    int result = real(fd);
    linger();
    return result;
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    int result = real(fd);
    linger();
    return result;
}
