#ifndef EVSTORE_CEPOLL_SHIM_H
#define EVSTORE_CEPOLL_SHIM_H
// epoll(7) and eventfd(2), which Glibc's Swift module leaves out. struct epoll_event is
// packed on x86-64, so Swift never touches it: these wrappers take and give its two fields.
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

static inline int evstore_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

static inline int evstore_epoll_ctl(int epfd, int op, int fd, uint32_t events, uint64_t tag) {
    struct epoll_event event;
    event.events = events;
    event.data.u64 = tag;
    return epoll_ctl(epfd, op, fd, &event);
}

/// Waits as epoll_wait does; the ready descriptors' tags and events go to `tags` and
/// `events` (at most `capacity`, at most 256).
static inline int evstore_epoll_wait(int epfd, uint64_t *tags, uint32_t *events, int capacity, int timeout) {
    struct epoll_event ready[256];
    if (capacity > 256) capacity = 256;
    int count = epoll_wait(epfd, ready, capacity, timeout);
    for (int i = 0; i < count; i++) {
        tags[i] = ready[i].data.u64;
        events[i] = ready[i].events;
    }
    return count;
}

static inline int evstore_eventfd(void) { return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }

static const uint32_t evstore_epollin = EPOLLIN;
static const uint32_t evstore_epollout = EPOLLOUT;
static const uint32_t evstore_epollhup = EPOLLHUP;
static const uint32_t evstore_epollerr = EPOLLERR;
static const int evstore_epoll_ctl_add = EPOLL_CTL_ADD;
static const int evstore_epoll_ctl_mod = EPOLL_CTL_MOD;
static const int evstore_epoll_ctl_del = EPOLL_CTL_DEL;
#endif
