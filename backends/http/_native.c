/* Optional native helpers for the HTTP client's per-read hot path (backends/http/native.py).
 *
 * Built by scripts/setup.d/50-http-native.sh into the venv as _llm_compare_http; everything here
 * has a pure-Python equivalent that runs when this module is absent (a GPU box without a
 * compiler still works). Why native: at 2000 streams x 25 events/s the client spends ~17-22 us
 * of one core per event in Python, ~40 % of it reading, de-chunking and framing
 * (docs/benchmarks.md, HTTP client).
 *
 * recv_stamped(fd, nbytes) -> (bytes, t_ns, rx_ns)
 *     One non-blocking recvmsg with the SO_TIMESTAMPNS stamp (_stamp.h: stamped_recv; native.py
 *     checks perf_counter_ns is CLOCK_MONOTONIC). Raises OSError (with BlockingIOError for
 *     EAGAIN) as socket.recvmsg does.
 *
 * RxThread: a receive thread for the same sockets (_rxthread.c, compiled into this module).
 *
 * frame_chunks(data, t_ns, rx_ns, emit, rawevent) -> int
 *     The common read, framed without Python: ``data`` is one or more whole, non-empty HTTP
 *     chunks (hex size without extensions), each holding whole SSE events in one of the two
 *     forms backends/http/sse.py's _parse_block takes a fast path for ("data:V" and
 *     "id:I\ndata:V", LF line ends). Calls emit(rawevent(t_ns, V, None, I or None, rx_ns)) per
 *     event and returns how many; returns -1 WITHOUT emitting anything for any other input
 *     (the Python path then handles the read exactly as before).
 */
#define _GNU_SOURCE /* memmem */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "_stamp.h"

#define BUF_BYTES (64 * 1024)

static char rbuf[BUF_BYTES]; /* the GIL is held throughout: one reader at a time */
static StampClock stamp_clock = {0, 0};

static PyObject *recv_stamped(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "recv_stamped(fd, nbytes)");
        return NULL;
    }
    int fd = (int)PyLong_AsLong(args[0]);
    Py_ssize_t want = PyLong_AsSsize_t(args[1]);
    if (PyErr_Occurred())
        return NULL;
    if (want <= 0 || want > BUF_BYTES)
        want = BUF_BYTES;
    long long t, u;
    ssize_t n = stamped_recv(fd, rbuf, (size_t)want, &stamp_clock, &t, &u);
    if (n < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    PyObject *data = PyBytes_FromStringAndSize(rbuf, n);
    if (data == NULL)
        return NULL;
    PyObject *tt = PyLong_FromLongLong(t);
    PyObject *uu = t == u ? (Py_XINCREF(tt), tt) : PyLong_FromLongLong(u);
    if (tt == NULL || uu == NULL) {
        Py_DECREF(data);
        Py_XDECREF(tt);
        Py_XDECREF(uu);
        return NULL;
    }
    PyObject *out = PyTuple_New(3);
    if (out == NULL) {
        Py_DECREF(data);
        Py_DECREF(tt);
        Py_DECREF(uu);
        return NULL;
    }
    PyTuple_SET_ITEM(out, 0, data);
    PyTuple_SET_ITEM(out, 1, tt);
    PyTuple_SET_ITEM(out, 2, uu);
    return out;
}

/* ------------------------------------------------------------------ framing */

typedef struct {
    const char *id;  /* NULL: no id line */
    Py_ssize_t id_len;
    const char *val;
    Py_ssize_t val_len;
} Ev;

static inline int starts(const char *p, Py_ssize_t n, const char *lit, Py_ssize_t k) {
    return n >= k && memcmp(p, lit, (size_t)k) == 0;
}

/* one event block (no terminator) in one of the two fast forms -> ev; 0 if not one of them */
static int parse_block(const char *b, Py_ssize_t n, Ev *ev) {
    const char *nl = memchr(b, '\n', (size_t)n);
    if (nl == NULL) {
        if (!starts(b, n, "data:", 5))
            return 0;
        Py_ssize_t s = (n > 5 && b[5] == ' ') ? 6 : 5;
        ev->id = NULL;
        ev->id_len = 0;
        ev->val = b + s;
        ev->val_len = n - s;
        return 1;
    }
    Py_ssize_t j = nl - b;
    if (!starts(b, n, "id:", 3) || !starts(b + j + 1, n - j - 1, "data:", 5))
        return 0;
    if (memchr(b + j + 1, '\n', (size_t)(n - j - 1)) != NULL)
        return 0;
    Py_ssize_t is = (j > 3 && b[3] == ' ') ? 4 : 3;
    if (is > j)
        return 0;
    Py_ssize_t ds = j + ((n > j + 6 && b[j + 6] == ' ') ? 7 : 6);
    ev->id = b + is;
    ev->id_len = j - is;
    ev->val = b + ds;
    ev->val_len = n - ds;
    return 1;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

#define MAX_EVENTS 256

static PyObject *frame_chunks(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "frame_chunks(data, t_ns, rx_ns, emit, rawevent)");
        return NULL;
    }
    if (!PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "data must be bytes");
        return NULL;
    }
    const char *d = PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    Ev evs[MAX_EVENTS];
    int count = 0;
    Py_ssize_t pos = 0;
    /* pass 1: validate the whole read, nothing emitted */
    while (pos < n) {
        Py_ssize_t size = 0, k = pos;
        while (k < n && k - pos < 8 && hexval(d[k]) >= 0)
            size = size * 16 + hexval(d[k++]);
        if (k == pos || size == 0 || k + 1 >= n || d[k] != '\r' || d[k + 1] != '\n')
            return PyLong_FromLong(-1);
        Py_ssize_t p = k + 2, end = p + size;
        if (end + 2 > n || d[end] != '\r' || d[end + 1] != '\n')
            return PyLong_FromLong(-1);
        if (memchr(d + p, '\r', (size_t)size) != NULL)
            return PyLong_FromLong(-1);
        /* the payload: whole events, each "block\n\n", blocks non-empty and not starting with LF */
        while (p < end) {
            const char *q = p < end - 1 ? memmem(d + p, (size_t)(end - p), "\n\n", 2) : NULL;
            if (q == NULL || q == d + p || count == MAX_EVENTS)
                return PyLong_FromLong(-1);
            if (!parse_block(d + p, q - (d + p), &evs[count]))
                return PyLong_FromLong(-1);
            count++;
            p = (q - d) + 2;
        }
        pos = end + 2;
    }
    if (count == 0)
        return PyLong_FromLong(-1);
    /* pass 2: build every event (a decode error still emits nothing), then emit in order */
    PyTypeObject *tp = (PyTypeObject *)args[4];
    if (!PyType_Check(args[4]) || !PyType_IsSubtype(tp, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "rawevent must be a tuple subclass");
        return NULL;
    }
    PyObject *built[MAX_EVENTS];
    int made = 0;
    for (; made < count; made++) {
        Ev *e = &evs[made];
        PyObject *val = PyUnicode_DecodeUTF8(e->val, e->val_len, NULL);
        PyObject *id = NULL;
        if (val != NULL && e->id != NULL)
            id = PyUnicode_DecodeUTF8(e->id, e->id_len, NULL);
        if (val == NULL || (e->id != NULL && id == NULL)) {
            Py_XDECREF(val);
            PyErr_Clear(); /* not UTF-8: the Python path raises it where it always did */
            for (int i = 0; i < made; i++)
                Py_DECREF(built[i]);
            return PyLong_FromLong(-1);
        }
        PyObject *ev = tp->tp_alloc(tp, 5);
        if (ev == NULL) {
            Py_DECREF(val);
            Py_XDECREF(id);
            for (int i = 0; i < made; i++)
                Py_DECREF(built[i]);
            return NULL;
        }
        Py_INCREF(args[1]);
        Py_INCREF(args[2]);
        Py_INCREF(Py_None);
        PyTuple_SET_ITEM(ev, 0, args[1]);
        PyTuple_SET_ITEM(ev, 1, val);
        PyTuple_SET_ITEM(ev, 2, Py_None);
        if (id == NULL) {
            Py_INCREF(Py_None);
            id = Py_None;
        }
        PyTuple_SET_ITEM(ev, 3, id);
        PyTuple_SET_ITEM(ev, 4, args[2]);
        built[made] = ev;
    }
    int i = 0;
    for (; i < count; i++) {
        PyObject *r = PyObject_CallOneArg(args[3], built[i]);
        Py_DECREF(built[i]);
        if (r == NULL)
            break;
        Py_DECREF(r);
    }
    if (i < count) {
        for (int j = i + 1; j < count; j++)
            Py_DECREF(built[j]);
        return NULL;
    }
    return PyLong_FromLong(count);
}

static PyMethodDef methods[] = {
    {"recv_stamped", (PyCFunction)(void (*)(void))recv_stamped, METH_FASTCALL,
     "recv_stamped(fd, nbytes) -> (bytes, t_ns, rx_ns)"},
    {"frame_chunks", (PyCFunction)(void (*)(void))frame_chunks, METH_FASTCALL,
     "frame_chunks(data, t_ns, rx_ns, emit, rawevent) -> events emitted, or -1 (nothing emitted)"},
    {NULL, NULL, 0, NULL},
};

#ifndef SOURCE_SHA
#define SOURCE_SHA ""
#endif

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_llm_compare_http", NULL, -1, methods};

int llm_rx_add_type(PyObject *m); /* _rxthread.c */

PyMODINIT_FUNC PyInit__llm_compare_http(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && llm_rx_add_type(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    /* which source it was built from: native.py ignores a build older than _native.c */
    if (m != NULL && PyModule_AddStringConstant(m, "SOURCE_SHA", SOURCE_SHA) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
