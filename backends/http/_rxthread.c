/* A receive thread for the HTTP client's stamped sockets (backends/http/rxstamp.py: RxThread).
 *
 * Why: on TCP the kernel keeps one receive stamp per queued segment and a segment coalesced into
 * the one before it passes its newer stamp on, so when the client reads a socket more than one
 * inter-token gap late, the older event gets the newer event's stamp (docs/benchmarks.md, HTTP client:
 * the timing error was ~5 us or ~one ITL, nothing between). The Python event loop cannot promise
 * to read within one gap: work that bunches up (thousands of streams ending together, steal time
 * on a VM) stalls it for 50-200 ms. This thread does nothing but epoll_wait + recvmsg, without the
 * GIL, so each segment is read (and its stamp taken) as it arrives, however late Python gets to
 * it; Python drains what was read in batches, woken through an eventfd.
 *
 * RxThread() -> object; starts the thread.
 *   .fileno()           the eventfd that becomes readable when reads are waiting (loop.add_reader)
 *   .add(fd) -> key     watch a connected non-blocking socket (SO_TIMESTAMPNS set by the caller)
 *   .remove(key)        stop watching; after it returns the thread never touches that fd again
 *   .drain() -> list    [(key, data, t_ns, rx_ns), ...] in read order; data b"" = EOF,
 *                       data None = the read failed with errno t_ns (the fd is no longer watched)
 *   .expect(fd, key, fmt) -> seq / .take(fd, key[, seq]) / .last(fd, key[, seq]): the response parsed
 *                       here (_fastsse.h); seq numbers responses so Python never takes a later one
 *   .chain(fd, key, fmt, wire) -> bool: the closed loop's next request on this connection, written
 *                       by this thread the moment the current response ends cleanly (see finish)
 *   .close()            stop and join the thread (also on dealloc)
 *   .priority()         the thread's priority in words (nice RX_NICE needs CAP_SYS_NICE)
 * t_ns/rx_ns as recv_stamped in _native.c: the kernel stamp in the CLOCK_MONOTONIC domain and
 * CLOCK_MONOTONIC right after the read (= time.perf_counter_ns() on Linux).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "_stamp.h"
#include "_fastsse.h"

#define RX_BYTES (64 * 1024)
#define RX_EVENTS 256
#define RX_NICE (-10)
#define RX_ROUND_US 250

typedef struct {
    uint32_t key;
    int32_t n; /* bytes read; 0: EOF; < 0: -errno */
    long long t, u;
    char *data;
    int kind;  /* 0: a read; 1: a read that completed a response head whose body is parsed here; 2: res */
    Fast *res; /* kind 2: a response's records (ended, bailed, or cut short) */
} Rec;

typedef struct {
    PyObject_HEAD
    int ep, wake, stop; /* epoll fd, eventfd to Python, eventfd to stop the thread */
    pthread_t th;
    int running;
    pthread_mutex_t mu; /* guards everything below */
    uint32_t *keys;     /* fd -> key watched (0: none) */
    Fast **fast;        /* fd -> the response parsed here (_fastsse.h), or NULL: reads go to Python */
    size_t nkeys;
    uint32_t next_key;
    Rec *q;
    size_t qn, qcap;
    int notified;
    StampClock clock; /* the thread's own realtime -> monotonic offset */
    long long seq;    /* the last response number given (expect, finish) */
    volatile int niced; /* the thread got RX_NICE (set by the thread as it starts) */
} RxThread;

/* one recvmsg on fd; fills r (r->data malloc'd when n > 0) */
static void read_one(RxThread *self, int fd, char *buf, Rec *r) {
    ssize_t n = stamped_recv(fd, buf, RX_BYTES, &self->clock, &r->t, &r->u);
    r->data = NULL;
    r->kind = 0;
    r->res = NULL;
    if (n < 0) {
        r->n = -errno;
        return;
    }
    r->n = (int32_t)n;
    if (n > 0) {
        r->data = malloc((size_t)n);
        if (r->data == NULL)
            r->n = -ENOMEM;
        else
            memcpy(r->data, buf, (size_t)n);
    }
}

/* The response parsed here on fd ended (or bailed). Its chained request (chain()) leaves now, from
   this thread: a closed-loop stream's next request then waits on no Python -- after thousands of
   streams end together the event loop takes ~0.2 ms of Python per request to get to each resend,
   which delayed the last ones by tens of ms (docs/benchmarks.md). Only after a clean end on a
   connection that stays open; the next response is parsed here too. Called with the lock held. */
static void finish(RxThread *self, int fd, Fast *f) {
    self->fast[fd] = NULL;
    if (f->next.n == 0 || !f->ended || f->bailed || f->close)
        return; /* (not sent: Python sends it the usual way) */
    f->chain_t0 = now_ns(CLOCK_MONOTONIC);
    ssize_t n = send(fd, f->next.p, f->next.n, MSG_DONTWAIT | MSG_NOSIGNAL);
    f->chain_ns = now_ns(CLOCK_MONOTONIC); /* right after the bytes left, as the Python path stamps */
    f->chain_n = n < 0 ? -errno : (long long)n;
    if (n > 0 && (self->fast[fd] = fast_new(f->next_fmt)) != NULL) /* (NULL, no memory: Python parses it) */
        f->chain_seq = self->fast[fd]->seq = ++self->seq;
}

/* A read of a socket whose response is parsed here: how many records it leaves in the queue at r
   (0: all consumed; the bytes are freed). Called with the lock held. */
static int fast_read(RxThread *self, int fd, Rec *r) {
    Fast *f = self->fast[fd];
    if (f == NULL)
        return 1;
    Rec *next = r + 1;
    if (r->n <= 0) { /* EOF or error: what was parsed goes first, then the read (kept on the record) */
        *next = *r;
        r->kind = 2;
        r->res = f;
        r->n = 0;
        r->data = NULL;
        self->fast[fd] = NULL;
        return 2;
    }
    if (!f->body) {
        long long b = fast_head(f, r->data, (size_t)r->n);
        if (b == -2) {
            fast_free(f);
            self->fast[fd] = NULL;
            return 1;
        }
        if (b == -1)
            return 1;
        r->kind = 1;
        size_t bn = (size_t)r->n - (size_t)b;
        r->n = (int32_t)b; /* the head's bytes go to Python; the body's stay here */
        if (bn == 0 || !fast_feed(f, r->data + b, bn, r->t, r->u))
            return 1;
        next->key = r->key;
        next->kind = 2;
        next->res = f;
        next->n = 0;
        next->data = NULL;
        next->t = r->t;
        next->u = r->u;
        finish(self, fd, f);
        return 2;
    }
    int ready = fast_feed(f, r->data, (size_t)r->n, r->t, r->u);
    free(r->data);
    r->data = NULL;
    if (!ready)
        return 0;
    r->kind = 2;
    r->res = f;
    r->n = 0;
    finish(self, fd, f);
    return 1;
}

static void *loop(void *arg) {
    RxThread *self = arg;
    /* Ahead of the event loop's thread on a shared core (a read later than one inter-token gap
       is what loses a stamp): nice RX_NICE where allowed (CAP_SYS_NICE; else the process's
       priority, and .priority() says so). But not woken per segment: after each round of
       reads the thread sleeps RX_ROUND_US, so arrivals meanwhile cost the sender no wake-up and
       the next round reads them together (at nice -10 without the pause it preempted the loop
       on every segment: sys CPU per event 8 -> 15 us, ingest 50k -> 35-47k events/s). The
       pause delays only when Python sees the bytes, never their kernel stamps. */
    self->niced = setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), RX_NICE) == 0;
    static __thread char buf[RX_BYTES];
    struct epoll_event evs[RX_EVENTS];
    for (;;) {
        int ne = epoll_wait(self->ep, evs, RX_EVENTS, -1);
        if (ne < 0) {
            if (errno == EINTR)
                continue;
            return NULL;
        }
        for (int i = 0; i < ne; i++) {
            uint64_t d = evs[i].data.u64;
            int fd = (int)(uint32_t)d;
            uint32_t key = (uint32_t)(d >> 32);
            if (key == 0) /* the stop eventfd */
                return NULL;
            int notify = 0;
            /* locked per read (remove() then waits for one recvmsg at most): once remove() has
               returned, this fd number may belong to another socket and must not be read */
            pthread_mutex_lock(&self->mu);
            if (self->qn + 2 > self->qcap) { /* room first: a read's bytes must never be dropped */
                size_t cap = self->qcap ? self->qcap * 2 : 1024;
                Rec *q = realloc(self->q, cap * sizeof(Rec));
                if (q != NULL) {
                    self->q = q;
                    self->qcap = cap;
                }
            }
            /* (no room: not read now; level-triggered epoll reports the socket again) */
            if (self->qn + 2 <= self->qcap && (size_t)fd < self->nkeys && self->keys[fd] == key) {
                Rec *r = &self->q[self->qn];
                r->key = key;
                read_one(self, fd, buf, r);
                if (r->n != -EAGAIN && r->n != -EWOULDBLOCK) {
                    int32_t got = r->n;
                    int recs = fast_read(self, fd, r);
                    self->qn += recs;
                    if (got <= 0) { /* EOF or error: stop watching (level-triggered epoll would spin) */
                        epoll_ctl(self->ep, EPOLL_CTL_DEL, fd, NULL);
                        self->keys[fd] = 0;
                    }
                    if (recs && !self->notified)
                        self->notified = notify = 1;
                }
            }
            pthread_mutex_unlock(&self->mu);
            if (notify) {
                uint64_t one = 1;
                ssize_t w = write(self->wake, &one, sizeof one);
                (void)w;
            }
        }
        if (ne < RX_EVENTS) { /* (a full round: more sockets are ready now, read them at once) */
            struct timespec pause = {0, RX_ROUND_US * 1000L};
            nanosleep(&pause, NULL);
        }
    }
}

static void stop_thread(RxThread *self) {
    if (self->running) {
        uint64_t one = 1;
        ssize_t w = write(self->stop, &one, sizeof one);
        (void)w;
        Py_BEGIN_ALLOW_THREADS
        pthread_join(self->th, NULL);
        Py_END_ALLOW_THREADS
        self->running = 0;
    }
}

static PyObject *rx_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
    if (PyTuple_GET_SIZE(args) || (kw && PyDict_GET_SIZE(kw))) {
        PyErr_SetString(PyExc_TypeError, "RxThread() takes no arguments");
        return NULL;
    }
    RxThread *self = (RxThread *)tp->tp_alloc(tp, 0);
    if (self == NULL)
        return NULL;
    self->ep = self->wake = self->stop = -1;
    pthread_mutex_init(&self->mu, NULL);
    self->next_key = 1;
    self->ep = epoll_create1(EPOLL_CLOEXEC);
    self->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    self->stop = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
    if (self->ep < 0 || self->wake < 0 || self->stop < 0 || epoll_ctl(self->ep, EPOLL_CTL_ADD, self->stop, &ev) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(self);
        return NULL;
    }
    int rc = pthread_create(&self->th, NULL, loop, self);
    if (rc != 0) {
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(self);
        return NULL;
    }
    self->running = 1;
    return (PyObject *)self;
}

static void free_queue(RxThread *self) {
    for (size_t i = 0; i < self->qn; i++) {
        free(self->q[i].data);
        fast_free(self->q[i].res);
    }
    self->qn = 0;
    for (size_t fd = 0; self->fast != NULL && fd < self->nkeys; fd++) {
        fast_free(self->fast[fd]);
        self->fast[fd] = NULL;
    }
}

static PyObject *rx_close(RxThread *self, PyObject *unused) {
    stop_thread(self);
    free_queue(self);
    if (self->ep >= 0) close(self->ep);
    if (self->wake >= 0) close(self->wake);
    if (self->stop >= 0) close(self->stop);
    self->ep = self->wake = self->stop = -1;
    Py_RETURN_NONE;
}

static void rx_dealloc(RxThread *self) {
    PyObject *r = rx_close(self, NULL);
    Py_XDECREF(r);
    free(self->q);
    free(self->keys);
    free(self->fast);
    pthread_mutex_destroy(&self->mu);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int check_open(RxThread *self) {
    if (!self->running) {
        PyErr_SetString(PyExc_ValueError, "RxThread is closed");
        return 0;
    }
    return 1;
}

static PyObject *rx_fileno(RxThread *self, PyObject *unused) {
    if (!check_open(self))
        return NULL;
    return PyLong_FromLong(self->wake);
}

static PyObject *rx_add(RxThread *self, PyObject *arg) {
    int fd = (int)PyLong_AsLong(arg);
    if (PyErr_Occurred())
        return NULL;
    if (!check_open(self))
        return NULL;
    if (fd < 0) {
        PyErr_SetString(PyExc_ValueError, "bad file descriptor");
        return NULL;
    }
    pthread_mutex_lock(&self->mu);
    if ((size_t)fd >= self->nkeys) {
        size_t n = self->nkeys ? self->nkeys : 1024;
        while (n <= (size_t)fd)
            n *= 2;
        uint32_t *k = realloc(self->keys, n * sizeof *k);
        if (k == NULL) {
            pthread_mutex_unlock(&self->mu);
            return PyErr_NoMemory();
        }
        memset(k + self->nkeys, 0, (n - self->nkeys) * sizeof *k);
        self->keys = k;
        Fast **fa = realloc(self->fast, n * sizeof *fa);
        if (fa == NULL) {
            pthread_mutex_unlock(&self->mu);
            return PyErr_NoMemory();
        }
        memset(fa + self->nkeys, 0, (n - self->nkeys) * sizeof *fa);
        self->fast = fa;
        self->nkeys = n;
    }
    uint32_t key = self->next_key++;
    if (self->next_key == 0)
        self->next_key = 1; /* 0 means "none" (and the stop eventfd) */
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = ((uint64_t)key << 32) | (uint32_t)fd};
    int rc = epoll_ctl(self->ep, EPOLL_CTL_ADD, fd, &ev);
    if (rc == 0)
        self->keys[fd] = key;
    pthread_mutex_unlock(&self->mu);
    if (rc < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromUnsignedLong(key);
}

static PyObject *rx_remove(RxThread *self, PyObject *arg) {
    unsigned long key = PyLong_AsUnsignedLong(arg);
    if (PyErr_Occurred())
        return NULL;
    pthread_mutex_lock(&self->mu);
    for (size_t fd = 0; key && fd < self->nkeys; fd++) { /* rare (once per connection): a scan is fine */
        if (self->keys[fd] == key) {
            if (self->ep >= 0)
                epoll_ctl(self->ep, EPOLL_CTL_DEL, (int)fd, NULL);
            self->keys[fd] = 0;
            fast_free(self->fast[fd]);
            self->fast[fd] = NULL;
            break;
        }
    }
    pthread_mutex_unlock(&self->mu);
    Py_RETURN_NONE;
}

/* a response's records for Python: (status, times, rx, counts, ids, sids, lps, finish, prompt,
   completion, terminal, ended, pend, pend_t, pend_u, rest, rest_t, rest_u, csize, cbuf, chain_n,
   chain_ns, chain_seq, end_t, chain_t0);
   status 1: the body ended here; 2: bailed (Python's path continues from pend + rest, then the
   raw chunk-coded cbuf with csize); 3: cut short (EOF, error, take). chain_n/chain_ns: the chained
   request's bytes sent and when (0: not sent; < 0: -errno, nothing sent; chain_t0: just before the
   send), chain_seq its response's
   number (0: not parsed here); end_t the receive stamp of the read that ended the body (0: it did
   not end here). Arrays as native bytes:
   int64 times/rx/ids/sids, int32 counts, double lps. */
static PyObject *fast_result(Fast *f) {
    int status = f->bailed ? 2 : f->ended ? 1 : 3;
    long long pl = f->bailed ? f->pend_len : 0;
#define B(b) ((b).p ? (b).p : ""), (Py_ssize_t)(b).n
    const char *rp = f->bailed && f->rest.p ? f->rest.p : "";
    size_t rn = f->bailed ? f->rest.n : 0;
    return Py_BuildValue("(iy#y#y#y#y#y#zLLiiy#LLy#LLLy#LLLLL)", status, B(f->times), B(f->rx), B(f->counts), B(f->ids),
        B(f->sids), B(f->lps), f->finish[0] ? f->finish : NULL, f->prompt, f->completion, f->terminal, f->ended,
        rp, (Py_ssize_t)pl, f->ev_t, f->ev_u, rp + pl, (Py_ssize_t)(rn - (size_t)pl), f->rest_t, f->rest_u,
        f->csize, f->line.p ? f->line.p : "", (Py_ssize_t)(f->bailed ? f->line.n : 0), f->chain_n, f->chain_ns,
        f->chain_seq, f->end_t, f->chain_t0);
#undef B
}

static PyObject *rx_drain(RxThread *self, PyObject *unused) {
    if (!check_open(self))
        return NULL;
    uint64_t v;
    ssize_t r = read(self->wake, &v, sizeof v); /* clear the wake-up first: a later read re-arms it */
    (void)r;
    pthread_mutex_lock(&self->mu);
    Rec *q = self->q;
    size_t n = self->qn;
    self->q = NULL;
    self->qn = self->qcap = 0;
    self->notified = 0;
    pthread_mutex_unlock(&self->mu);
    PyObject *out = PyList_New((Py_ssize_t)n);
    size_t i = 0;
    for (; out != NULL && i < n; i++) {
        Rec *e = &q[i];
        PyObject *data, *t, *u, *x;
        if (e->kind == 2) {
            Py_INCREF(Py_None);
            data = Py_None;
            t = PyLong_FromLongLong(e->t);
            x = fast_result(e->res);
        } else {
            if (e->n >= 0) {
                data = PyBytes_FromStringAndSize(e->data, e->n);
                t = PyLong_FromLongLong(e->t);
            } else {
                Py_INCREF(Py_None);
                data = Py_None;
                t = PyLong_FromLong(-e->n);
            }
            x = e->kind == 1 ? Py_True : Py_None;
            Py_INCREF(x);
        }
        u = PyLong_FromLongLong(e->u);
        PyObject *k = PyLong_FromUnsignedLong(e->key);
        PyObject *tup = (data && t && u && k && x) ? PyTuple_New(5) : NULL;
        if (tup == NULL) {
            Py_XDECREF(data);
            Py_XDECREF(t);
            Py_XDECREF(u);
            Py_XDECREF(k);
            Py_XDECREF(x);
            Py_CLEAR(out);
            break;
        }
        PyTuple_SET_ITEM(tup, 0, k);
        PyTuple_SET_ITEM(tup, 1, data);
        PyTuple_SET_ITEM(tup, 2, t);
        PyTuple_SET_ITEM(tup, 3, u);
        PyTuple_SET_ITEM(tup, 4, x);
        PyList_SET_ITEM(out, (Py_ssize_t)i, tup);
        free(e->data);
        e->data = NULL;
        fast_free(e->res);
        e->res = NULL;
    }
    for (; i < n; i++) {
        free(q[i].data);
        fast_free(q[i].res);
    }
    free(q);
    return out;
}

/* (fd, key) of expect/take/last/chain: 0 with a TypeError set when the call is malformed;
   want < 0: -want arguments, or one more (an optional response number) */
static int fd_key_args(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, const char *usage,
                       long *fd, unsigned long *key) {
    if (want < 0 ? nargs != -want && nargs != 1 - want : nargs != want) {
        PyErr_SetString(PyExc_TypeError, usage);
        return 0;
    }
    *fd = PyLong_AsLong(args[0]);
    *key = PyLong_AsUnsignedLong(args[1]);
    return !PyErr_Occurred();
}

/* (fd, key, format) of expect/chain: 0 with an exception set when malformed or not a known format */
static int fd_key_fmt_args(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, const char *usage,
                           long *fd, unsigned long *key, long *fmt) {
    if (!fd_key_args(args, nargs, want, usage, fd, key))
        return 0;
    *fmt = PyLong_AsLong(args[2]);
    if (PyErr_Occurred())
        return 0;
    if (*fmt < FAST_COMPLETIONS || *fmt > FAST_TGI) {
        PyErr_SetString(PyExc_ValueError, "format must be 1 (completions), 2 (chat) or 3 (tgi)");
        return 0;
    }
    return 1;
}

/* the socket fd is still the one registered under key (call with self->mu held) */
static int slot_is(RxThread *self, long fd, unsigned long key) {
    return fd >= 0 && (size_t)fd < self->nkeys && self->keys[fd] == key && key;
}

/* the response parsed on fd, if it is number seq (0: whichever; numbers start at 1) (call with
   self->mu held): a response the thread began after a chained send is never taken for the one before it */
static Fast *fast_at(RxThread *self, long fd, unsigned long key, long long seq) {
    if (!slot_is(self, fd, key) || self->fast[fd] == NULL)
        return NULL;
    return seq == 0 || self->fast[fd]->seq == seq ? self->fast[fd] : NULL;
}

/* expect(fd, key, format) -> seq: parse the next response on that socket here (_fastsse.h); its
   number (0: not parsed here). Called before the request is written, so no byte of the response
   can be read before it. */
static PyObject *rx_expect(RxThread *self, PyObject *const *args, Py_ssize_t nargs) {
    long fd, fmt;
    unsigned long key;
    if (!fd_key_fmt_args(args, nargs, 3, "expect(fd, key, format)", &fd, &key, &fmt))
        return NULL;
    long long seq = 0;
    pthread_mutex_lock(&self->mu);
    if (slot_is(self, fd, key)) {
        fast_free(self->fast[fd]);
        self->fast[fd] = fast_new((int)fmt);
        if (self->fast[fd] != NULL)
            seq = self->fast[fd]->seq = ++self->seq;
    }
    pthread_mutex_unlock(&self->mu);
    return PyLong_FromLongLong(seq);
}

static int seq_arg(PyObject *const *args, Py_ssize_t nargs, long long *seq) {
    *seq = nargs > 2 ? PyLong_AsLongLong(args[2]) : 0;
    return !PyErr_Occurred();
}

/* take(fd, key[, seq]) -> the records parsed so far (a result tuple, status 3) or None; parsing stops */
static PyObject *rx_take(RxThread *self, PyObject *const *args, Py_ssize_t nargs) {
    long fd;
    unsigned long key;
    long long seq;
    if (!fd_key_args(args, nargs, -2, "take(fd, key[, seq])", &fd, &key) || !seq_arg(args, nargs, &seq))
        return NULL;
    pthread_mutex_lock(&self->mu);
    Fast *f = fast_at(self, fd, key, seq);
    if (f != NULL)
        self->fast[fd] = NULL;
    pthread_mutex_unlock(&self->mu);
    if (f == NULL)
        Py_RETURN_NONE;
    PyObject *r = fast_result(f);
    fast_free(f);
    return r;
}

/* last(fd, key[, seq]) -> CLOCK_MONOTONIC ns of the last read parsed here (0: none): the read timeout */
static PyObject *rx_last(RxThread *self, PyObject *const *args, Py_ssize_t nargs) {
    long fd;
    unsigned long key;
    long long seq;
    if (!fd_key_args(args, nargs, -2, "last(fd, key[, seq])", &fd, &key) || !seq_arg(args, nargs, &seq))
        return NULL;
    long long last = 0;
    pthread_mutex_lock(&self->mu);
    Fast *f = fast_at(self, fd, key, seq);
    if (f != NULL)
        last = f->last_u;
    pthread_mutex_unlock(&self->mu);
    return PyLong_FromLongLong(last);
}

/* chain(fd, key, format, wire) -> bool: write ``wire`` (the next request on this connection) the
   moment the response parsed here ends cleanly, then parse its response here too (finish). False:
   nothing is being parsed on that socket (already ended, bailed, not expected): Python sends it. */
static PyObject *rx_chain(RxThread *self, PyObject *const *args, Py_ssize_t nargs) {
    long fd, fmt;
    unsigned long key;
    if (!fd_key_fmt_args(args, nargs, 4, "chain(fd, key, format, wire)", &fd, &key, &fmt))
        return NULL;
    char *p;
    Py_ssize_t n;
    if (PyBytes_AsStringAndSize(args[3], &p, &n) < 0 || n == 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "chain(fd, key, format, wire): wire must be non-empty bytes");
        return NULL;
    }
    int ok = 0;
    pthread_mutex_lock(&self->mu);
    Fast *f = slot_is(self, fd, key) ? self->fast[fd] : NULL;
    if (f != NULL && !f->ended && !f->bailed && f->next.n == 0) {
        ok = buf_add(&f->next, p, (size_t)n) == 0;
        f->next_fmt = (int)fmt;
    }
    pthread_mutex_unlock(&self->mu);
    return PyBool_FromLong(ok);
}

static PyObject *rx_priority(RxThread *self, PyObject *unused) {
    if (self->niced)
        return PyUnicode_FromFormat("nice %d", RX_NICE);
    return PyUnicode_FromFormat("the process's priority (nice %d needs CAP_SYS_NICE)", RX_NICE);
}

static PyMethodDef rx_methods[] = {
    {"priority", (PyCFunction)rx_priority, METH_NOARGS, "the thread's scheduling priority, in words"},
    {"fileno", (PyCFunction)rx_fileno, METH_NOARGS, "the eventfd that is readable while reads wait"},
    {"add", (PyCFunction)rx_add, METH_O, "add(fd) -> key"},
    {"remove", (PyCFunction)rx_remove, METH_O, "remove(key)"},
    {"drain", (PyCFunction)rx_drain, METH_NOARGS, "drain() -> [(key, data, t_ns, rx_ns, x), ...]"},
    {"expect", (PyCFunction)(void (*)(void))rx_expect, METH_FASTCALL, "expect(fd, key, format) -> seq (0: not here)"},
    {"take", (PyCFunction)(void (*)(void))rx_take, METH_FASTCALL, "take(fd, key[, seq]) -> result or None"},
    {"last", (PyCFunction)(void (*)(void))rx_last, METH_FASTCALL, "last(fd, key[, seq]) -> ns of the last read parsed"},
    {"chain", (PyCFunction)(void (*)(void))rx_chain, METH_FASTCALL, "chain(fd, key, format, wire) -> bool"},
    {"close", (PyCFunction)rx_close, METH_NOARGS, "stop and join the thread"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RxThreadType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_llm_compare_http.RxThread",
    .tp_basicsize = sizeof(RxThread),
    .tp_dealloc = (destructor)rx_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A thread that reads watched sockets with their kernel receive stamps (see _rxthread.c).",
    .tp_methods = rx_methods,
    .tp_new = rx_new,
};

int llm_rx_add_type(PyObject *m) {
    if (PyType_Ready(&RxThreadType) < 0)
        return -1;
    Py_INCREF(&RxThreadType);
    if (PyModule_AddObject(m, "RxThread", (PyObject *)&RxThreadType) < 0) {
        Py_DECREF(&RxThreadType);
        return -1;
    }
    return 0;
}
