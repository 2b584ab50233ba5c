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
#include <sys/syscall.h>
#include <unistd.h>

#include "_stamp.h"

#define RX_BYTES (64 * 1024)
#define RX_EVENTS 256
#define RX_NICE (-10)
#define RX_ROUND_US 250

typedef struct {
    uint32_t key;
    int32_t n; /* bytes read; 0: EOF; < 0: -errno */
    long long t, u;
    char *data;
} Rec;

typedef struct {
    PyObject_HEAD
    int ep, wake, stop; /* epoll fd, eventfd to Python, eventfd to stop the thread */
    pthread_t th;
    int running;
    pthread_mutex_t mu; /* guards everything below */
    uint32_t *keys;     /* fd -> key watched (0: none) */
    size_t nkeys;
    uint32_t next_key;
    Rec *q;
    size_t qn, qcap;
    int notified;
    StampClock clock; /* the thread's own realtime -> monotonic offset */
    volatile int niced; /* the thread got RX_NICE (set by the thread as it starts) */
} RxThread;

/* one recvmsg on fd; fills r (r->data malloc'd when n > 0) */
static void read_one(RxThread *self, int fd, char *buf, Rec *r) {
    ssize_t n = stamped_recv(fd, buf, RX_BYTES, &self->clock, &r->t, &r->u);
    r->data = NULL;
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
            if (self->qn == self->qcap) { /* room first: a read's bytes must never be dropped */
                size_t cap = self->qcap ? self->qcap * 2 : 1024;
                Rec *q = realloc(self->q, cap * sizeof(Rec));
                if (q != NULL) {
                    self->q = q;
                    self->qcap = cap;
                }
            }
            /* (no room: not read now; level-triggered epoll reports the socket again) */
            if (self->qn < self->qcap && (size_t)fd < self->nkeys && self->keys[fd] == key) {
                Rec *r = &self->q[self->qn];
                r->key = key;
                read_one(self, fd, buf, r);
                if (r->n != -EAGAIN && r->n != -EWOULDBLOCK) {
                    self->qn++;
                    if (r->n <= 0) { /* EOF or error: stop watching (level-triggered epoll would spin) */
                        epoll_ctl(self->ep, EPOLL_CTL_DEL, fd, NULL);
                        self->keys[fd] = 0;
                    }
                    if (!self->notified)
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
        struct timespec pause = {0, RX_ROUND_US * 1000L};
        nanosleep(&pause, NULL);
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
    for (size_t i = 0; i < self->qn; i++)
        free(self->q[i].data);
    self->qn = 0;
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
            break;
        }
    }
    pthread_mutex_unlock(&self->mu);
    Py_RETURN_NONE;
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
        PyObject *data, *t, *u;
        if (e->n >= 0) {
            data = PyBytes_FromStringAndSize(e->data, e->n);
            t = PyLong_FromLongLong(e->t);
        } else {
            Py_INCREF(Py_None);
            data = Py_None;
            t = PyLong_FromLong(-e->n);
        }
        u = PyLong_FromLongLong(e->u);
        PyObject *k = PyLong_FromUnsignedLong(e->key);
        PyObject *tup = (data && t && u && k) ? PyTuple_New(4) : NULL;
        if (tup == NULL) {
            Py_XDECREF(data);
            Py_XDECREF(t);
            Py_XDECREF(u);
            Py_XDECREF(k);
            Py_CLEAR(out);
            break;
        }
        PyTuple_SET_ITEM(tup, 0, k);
        PyTuple_SET_ITEM(tup, 1, data);
        PyTuple_SET_ITEM(tup, 2, t);
        PyTuple_SET_ITEM(tup, 3, u);
        PyList_SET_ITEM(out, (Py_ssize_t)i, tup);
        free(e->data);
        e->data = NULL;
    }
    for (; i < n; i++)
        free(q[i].data);
    free(q);
    return out;
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
    {"drain", (PyCFunction)rx_drain, METH_NOARGS, "drain() -> [(key, data, t_ns, rx_ns), ...]"},
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
