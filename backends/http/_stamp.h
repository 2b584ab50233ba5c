/* The stamped read both C helpers share (included by _native.c and _rxthread.c, one module).
 *
 * stamped_recv(fd, buf, len, clk, &t, &u): one non-blocking recvmsg with the SO_TIMESTAMPNS
 * stamp. u = CLOCK_MONOTONIC right after the read (= time.perf_counter_ns() on Linux); t = the
 * kernel's receive stamp moved from CLOCK_REALTIME to CLOCK_MONOTONIC (u when the read carried
 * none, or when it converts to later than u). The offset comes from a realtime read bracketed by
 * two monotonic reads; a bracket wider than STAMP_BRACKET_NS (preempted) keeps the last good
 * offset in *clk. Returns recvmsg's result (-1 with errno set, u still filled). Same rules as
 * rxstamp.StampedSocket._read.
 */
#ifndef LLM_COMPARE_STAMP_H
#define LLM_COMPARE_STAMP_H

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#ifndef SO_TIMESTAMPNS
#define SO_TIMESTAMPNS 35
#endif
#ifndef SCM_TIMESTAMPNS
#define SCM_TIMESTAMPNS SO_TIMESTAMPNS
#endif

#define STAMP_BRACKET_NS 4000

typedef struct {
    long long off; /* CLOCK_REALTIME - CLOCK_MONOTONIC, last good sample */
    int have;
} StampClock;

static inline long long now_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static ssize_t stamped_recv(int fd, char *buf, size_t len, StampClock *clk, long long *t, long long *u) {
    union {
        char b[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } ctrl;
    struct iovec iov = {buf, len};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl.b;
    msg.msg_controllen = sizeof ctrl.b;
    ssize_t n;
    do {
        n = recvmsg(fd, &msg, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    int err = errno;
    *u = *t = now_ns(CLOCK_MONOTONIC);
    if (n < 0) {
        errno = err;
        return n;
    }
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS &&
            c->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(c), sizeof ts);
            long long r = now_ns(CLOCK_REALTIME);
            long long b = now_ns(CLOCK_MONOTONIC);
            if (b - *u < STAMP_BRACKET_NS || !clk->have) {
                clk->off = r - (*u + b) / 2;
                clk->have = 1;
            }
            long long k = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec - clk->off;
            if (k < *u)
                *t = k;
            break;
        }
    }
    return n;
}

#endif
