#ifndef EVSTORE_CFILEIO_SHIM_H
#define EVSTORE_CFILEIO_SHIM_H
/* sync_file_range(2), which Glibc's Swift module leaves out (it is a GNU extension).
   Headers only, nothing to link. */
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Starts writing the dirty pages of `count` bytes at `offset` to the disk and returns
   without waiting for them (SYNC_FILE_RANGE_WRITE, 2): a later fsync finds less to do.
   It makes nothing durable by itself. 0, or -1 with errno. */
static inline int evstore_start_writeback(int descriptor, int64_t offset, int64_t count) {
    return (int)syscall(SYS_sync_file_range, descriptor, offset, count, 2u);
}

#endif
