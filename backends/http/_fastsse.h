/* A response's whole body parsed in the receive thread: chunked coding, SSE framing and the
 * token fields of the known streaming formats, recorded per event (stamp, read time, token count,
 * token ids, logprob, the SSE id) so Python sees the response once, when it ends.
 *
 * Formats (FAST_*): OpenAI completions chunks, OpenAI chat chunks (vLLM's ``token_ids``), TGI's
 * /generate_stream token events. Every event must be in one of the two forms sse.py's fast path
 * takes ("data:V" or "id:I\ndata:V", LF line ends) and its JSON must hold only what the Python
 * parsers (openai.py ``_fast``, tgi.py) read the same way; ANYTHING else -- an error object,
 * logprobs on an OpenAI chunk, top_tokens, a field of another type, a comment, CRLF line ends,
 * invalid UTF-8, a number that is not a plain integer where one is expected -- "bails": the
 * events recorded so far go to Python, followed by the unparsed rest of the body with its stamps
 * and the chunk decoder's state, and Python's own path (connection.py, sse.py, the protocol's
 * parser) takes over from that byte on. Nothing is decided here that Python would decide
 * differently: tests/backends/http/test_http_fastsse.py compares both on the same streams.
 *
 * Stamps follow sse.py's rule: an event carries the stamps of the read that held its first byte.
 */
#ifndef LLM_COMPARE_FASTSSE_H
#define LLM_COMPARE_FASTSSE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define FAST_COMPLETIONS 1
#define FAST_CHAT 2
#define FAST_TGI 3
#define FAST_HEAD_MAX 16384
#define FAST_NO_SID INT64_MIN

typedef struct {
    char *p;
    size_t n, cap;
} Buf;

static int buf_add(Buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, d, n);
    b->n += n;
    return 0;
}

typedef struct {
    int fmt, body;     /* body: the head was accepted; bytes from here on are parsed here */
    Buf head;          /* the head so far (scanned only: its bytes go to Python as read) */
    long long csize;   /* -1: a size line; -2: the CRLF after chunk data; > 0: data left */
    Buf line;          /* raw bytes of a partial size line / CRLF (Python's cbuf on a bail) */
    Buf ev;            /* de-chunked bytes of an event begun but not terminated */
    long long ev_t, ev_u, last_u; /* last_u: the last read parsed */
    /* the records */
    Buf times, rx, counts, ids, sids, lps; /* int64, int64, int32, int64, int64, double */
    char finish[64];
    long long prompt, completion; /* -1: not sent */
    int terminal, ended, bailed;
    Buf rest;          /* on a bail: de-chunked bytes from the failed event on */
    long long pend_len, rest_t, rest_u; /* rest[:pend_len] began in an earlier read (ev_t/ev_u) */
    int close;         /* the head said "connection: close": nothing may follow on this socket */
    /* the closed loop's next request on this connection (_rxthread.c chain): sent the moment this
       response ends cleanly; chain_n: bytes it sent (0: not sent; < 0: -errno), chain_ns: right
       after the send, chain_t0: right before it (connection.send_stamp picks one) */
    Buf next;
    int next_fmt;
    long long chain_n, chain_ns, chain_t0;
    long long seq, chain_seq; /* this response's number (RxThread); the chained response's */
    long long end_t;          /* the receive stamp of the read that ended the body (0: not ended) */
} Fast;

static Fast *fast_new(int fmt) {
    Fast *f = calloc(1, sizeof *f);
    if (f != NULL) {
        f->fmt = fmt;
        f->csize = -1;
        f->prompt = f->completion = -1;
    }
    return f;
}

static void fast_free(Fast *f) {
    if (f == NULL)
        return;
    Buf *bs[] = {&f->head, &f->line, &f->ev, &f->times, &f->rx, &f->counts, &f->ids, &f->sids, &f->lps, &f->rest,
                 &f->next};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++)
        free(bs[i]->p);
    free(f);
}

/* ------------------------------------------------------------------ strict JSON scanning */
typedef struct {
    const char *p, *e;
} J;

static void ws(J *j) {
    while (j->p < j->e && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int lit(J *j, const char *s) {
    size_t n = strlen(s);
    if ((size_t)(j->e - j->p) < n || memcmp(j->p, s, n) != 0)
        return 0;
    j->p += n;
    return 1;
}

/* a string; s, n: its raw contents (escapes not decoded), *esc: it has escapes */
static int jstr(J *j, const char **s, size_t *n, int *esc) {
    if (j->p >= j->e || *j->p != '"')
        return 0;
    const char *a = ++j->p;
    int e = 0;
    while (j->p < j->e) {
        unsigned char c = (unsigned char)*j->p;
        if (c == '"') {
            if (s) *s = a;
            if (n) *n = (size_t)(j->p - a);
            if (esc) *esc = e;
            j->p++;
            return 1;
        }
        if (c < 0x20)
            return 0;
        if (c == '\\') {
            e = 1;
            if (j->e - j->p < 2)
                return 0;
            char k = j->p[1];
            if (k == 'u') {
                if (j->e - j->p < 6)
                    return 0;
                for (int i = 2; i < 6; i++)
                    if (!((j->p[i] >= '0' && j->p[i] <= '9') || ((j->p[i] | 32) >= 'a' && (j->p[i] | 32) <= 'f')))
                        return 0;
                /* a lone surrogate escape is refused by some decoders and not others: Python decides */
                if ((j->p[2] | 32) == 'd' && strchr("89abAB", j->p[3]))
                    return 0;
                j->p += 6;
            } else if (strchr("\"\\/bfnrt", k) && k) {
                j->p += 2;
            } else {
                return 0;
            }
            continue;
        }
        j->p++;
    }
    return 0;
}

/* a number; *is_int: a plain integer (no fraction/exponent) fitting int64 -> *iv */
static int jnum(J *j, int *is_int, long long *iv) {
    const char *a = j->p;
    if (j->p < j->e && *j->p == '-')
        j->p++;
    if (j->p >= j->e || *j->p < '0' || *j->p > '9')
        return 0;
    if (*j->p == '0' && j->p + 1 < j->e && j->p[1] >= '0' && j->p[1] <= '9')
        return 0;
    while (j->p < j->e && *j->p >= '0' && *j->p <= '9')
        j->p++;
    int frac = 0;
    if (j->p < j->e && *j->p == '.') {
        frac = 1;
        j->p++;
        if (j->p >= j->e || *j->p < '0' || *j->p > '9')
            return 0;
        while (j->p < j->e && *j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    if (j->p < j->e && (*j->p | 32) == 'e') {
        frac = 1;
        j->p++;
        if (j->p < j->e && (*j->p == '+' || *j->p == '-'))
            j->p++;
        if (j->p >= j->e || *j->p < '0' || *j->p > '9')
            return 0;
        while (j->p < j->e && *j->p >= '0' && *j->p <= '9')
            j->p++;
    }
    *is_int = 0;
    if (!frac && j->p - a <= 18) { /* |v| < 1e18: no overflow */
        *is_int = 1;
        *iv = strtoll(a, NULL, 10);
    }
    return 1;
}

static int jskip(J *j, int depth);

static int jcontainer(J *j, int depth, char open) {
    if (depth > 32)
        return 0;
    char close = open == '{' ? '}' : ']';
    j->p++;
    ws(j);
    if (j->p < j->e && *j->p == close) {
        j->p++;
        return 1;
    }
    for (;;) {
        if (open == '{') {
            ws(j);
            if (!jstr(j, NULL, NULL, NULL))
                return 0;
            ws(j);
            if (j->p >= j->e || *j->p++ != ':')
                return 0;
        }
        ws(j);
        if (!jskip(j, depth + 1))
            return 0;
        ws(j);
        if (j->p >= j->e)
            return 0;
        char c = *j->p++;
        if (c == close)
            return 1;
        if (c != ',')
            return 0;
    }
}

static int jskip(J *j, int depth) {
    if (j->p >= j->e)
        return 0;
    char c = *j->p;
    int is_int;
    long long iv;
    if (c == '"')
        return jstr(j, NULL, NULL, NULL);
    if (c == '{' || c == '[')
        return jcontainer(j, depth, c);
    if (c == 't')
        return lit(j, "true");
    if (c == 'f')
        return lit(j, "false");
    if (c == 'n')
        return lit(j, "null");
    return jnum(j, &is_int, &iv);
}

/* iterate an object's members: call with j at '{'; each call gives the next key (raw, no escapes) */
static int jobj_begin(J *j) {
    ws(j);
    if (j->p >= j->e || *j->p != '{')
        return 0;
    j->p++;
    ws(j);
    return 1;
}

/* 1: k, kn set, j at the value; 0: the object ended; -1: malformed */
static int jobj_next(J *j, int *first, const char **k, size_t *kn) {
    ws(j);
    if (j->p >= j->e)
        return -1;
    if (*j->p == '}') {
        j->p++;
        return 0;
    }
    if (!*first) {
        if (*j->p != ',')
            return -1;
        j->p++;
        ws(j);
    }
    *first = 0;
    int esc;
    if (!jstr(j, k, kn, &esc) || esc)
        return -1;
    ws(j);
    if (j->p >= j->e || *j->p++ != ':')
        return -1;
    ws(j);
    return 1;
}

#define KEY(s) (kn == sizeof(s) - 1 && memcmp(k, s, kn) == 0)

static int is_null(J *j) {
    return lit(j, "null");
}


/* ------------------------------------------------------------------ the formats */
static int utf8_ok(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t k;
        unsigned int cp;
        if (c >= 0xC2 && c <= 0xDF) { k = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { k = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { k = 3; cp = c & 0x07; }
        else return 0;
        for (size_t m = 1; m <= k; m++) {
            if (i + m >= n || (s[i + m] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + m] & 0x3F);
        }
        if ((k == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += k + 1;
    }
    return 1;
}

/* one token event whose nids ids are already at the end of f->ids */
static int add_event(Fast *f, long long t, long long u, int32_t nids, long long sid) {
    return buf_add(&f->times, &t, 8) | buf_add(&f->rx, &u, 8) | buf_add(&f->counts, &nids, 4)
        | buf_add(&f->sids, &sid, 8);
}

/* an array of int64 ids (or null: *n = 0) into b */
static int int_array(J *j, Buf *b, int32_t *n) {
    *n = 0;
    if (is_null(j))
        return 1;
    if (j->p >= j->e || *j->p != '[')
        return 0;
    j->p++;
    ws(j);
    if (j->p < j->e && *j->p == ']') { j->p++; return 1; }
    for (;;) {
        ws(j);
        int is_int;
        long long v;
        if (!jnum(j, &is_int, &v) || !is_int || buf_add(b, &v, 8) < 0)
            return 0;
        (*n)++;
        ws(j);
        if (j->p >= j->e) return 0;
        char c = *j->p++;
        if (c == ']') return 1;
        if (c != ',') return 0;
    }
}

/* a string or null: *len = -1 for null; the raw (undecoded) contents in s */
static int str_or_null(J *j, const char **s, long long *len, int *esc) {
    if (is_null(j)) { *len = -1; return 1; }
    size_t n;
    if (!jstr(j, s, &n, esc)) return 0;
    *len = (long long)n;
    return 1;
}

static int int_or_null(J *j, long long *v) {
    if (is_null(j)) { *v = -1; return 1; }
    int is_int;
    return jnum(j, &is_int, v) && is_int && *v >= 0;
}

static int set_finish(Fast *f, const char *s, long long n, int esc) {
    if (esc || n >= (long long)sizeof f->finish) return 0;
    memcpy(f->finish, s, (size_t)n);
    f->finish[n] = 0;
    return 1;
}

/* one OpenAI completions/chat chunk (openai.py _fast + EventSink.push); 0: bail */
static int parse_openai(Fast *f, J *j, long long t, long long u, long long sid) {
    if (j->e - j->p == 6 && memcmp(j->p, "[DONE]", 6) == 0) {
        f->terminal = 1;
        return 1;
    }
    int first = 1, r;
    const char *k;
    size_t kn;
    if (!jobj_begin(j)) return 0;
    while ((r = jobj_next(j, &first, &k, &kn)) == 1) {
        if (KEY("error")) return 0;
        if (KEY("choices")) {
            if (is_null(j)) continue;
            if (*j->p != '[') return 0;
            j->p++;
            ws(j);
            if (j->p < j->e && *j->p == ']') { j->p++; continue; }
            for (;;) {
                int cf = 1, cr;
                long long text_len = -1, content_len = -1;
                int32_t nids = 0;
                size_t ids_at = f->ids.n;
                if (!jobj_begin(j)) return 0;
                while ((cr = jobj_next(j, &cf, &k, &kn)) == 1) {
                    const char *s;
                    long long n;
                    int esc;
                    if (KEY("token_ids")) {
                        f->ids.n = ids_at;
                        if (!int_array(j, &f->ids, &nids)) return 0;
                    } else if (KEY("text")) {
                        if (!str_or_null(j, &s, &text_len, &esc)) return 0;
                    } else if (KEY("finish_reason")) {
                        if (!str_or_null(j, &s, &n, &esc)) return 0;
                        if (n > 0 && !set_finish(f, s, n, esc)) return 0;
                    } else if (KEY("logprobs")) {
                        if (!is_null(j)) return 0;
                    } else if (KEY("delta")) {
                        if (is_null(j)) continue;
                        int df = 1, dr;
                        if (!jobj_begin(j)) return 0;
                        while ((dr = jobj_next(j, &df, &k, &kn)) == 1) {
                            if (KEY("content")) {
                                if (!str_or_null(j, &s, &content_len, &esc)) return 0;
                            } else if (!jskip(j, 2)) {
                                return 0;
                            }
                        }
                        if (dr < 0) return 0;
                    } else if (!jskip(j, 1)) {
                        return 0;
                    }
                }
                if (cr < 0) return 0;
                long long text = f->fmt == FAST_CHAT ? content_len : text_len;
                long long unknown = -1;
                if (nids > 0) {
                    if (add_event(f, t, u, nids, sid)) return 0;
                } else if (text > 0) {
                    if (buf_add(&f->ids, &unknown, 8) || add_event(f, t, u, 1, sid)) return 0;
                }
                ws(j);
                if (j->p >= j->e) return 0;
                char c = *j->p++;
                if (c == ']') break;
                if (c != ',') return 0;
                ws(j);
            }
        } else if (KEY("usage")) {
            if (is_null(j)) continue;
            int uf = 1, ur;
            long long p = -1, c = -1;
            if (!jobj_begin(j)) return 0;
            while ((ur = jobj_next(j, &uf, &k, &kn)) == 1) {
                if (KEY("prompt_tokens")) {
                    if (!int_or_null(j, &p)) return 0;
                } else if (KEY("completion_tokens")) {
                    if (!int_or_null(j, &c)) return 0;
                } else if (!jskip(j, 2)) {
                    return 0;
                }
            }
            if (ur < 0) return 0;
            if (p >= 0) f->prompt = p;
            if (c >= 0) f->completion = c;
        } else if (!jskip(j, 1)) {
            return 0;
        }
    }
    if (r < 0) return 0;
    ws(j);
    return j->p == j->e;
}

/* one TGI /generate_stream event (tgi.py parse_generate_stream); 0: bail */
static int parse_tgi(Fast *f, J *j, long long t, long long u, long long sid) {
    int first = 1, r, have_tok = 0, done = 0;
    long long tid = 0, prompt = -1, completion = -1;
    double lp = 0;
    int have_lp = 0;
    char finish[64] = {0};
    const char *k;
    size_t kn;
    if (!jobj_begin(j)) return 0;
    while ((r = jobj_next(j, &first, &k, &kn)) == 1) {
        if (KEY("error")) return 0;
        if (KEY("token")) {
            int tf = 1, tr, have_id = 0;
            if (!jobj_begin(j)) return 0;
            while ((tr = jobj_next(j, &tf, &k, &kn)) == 1) {
                const char *s;
                long long n;
                int esc;
                if (KEY("id")) {
                    int is_int;
                    if (!jnum(j, &is_int, &tid) || !is_int) return 0;
                    have_id = 1;
                } else if (KEY("text")) {
                    if (!str_or_null(j, &s, &n, &esc)) return 0;
                } else if (KEY("logprob")) {
                    if (is_null(j)) { have_lp = 0; continue; }
                    const char *a = j->p;
                    int is_int;
                    long long v;
                    if (!jnum(j, &is_int, &v)) return 0;
                    char tmp[64];
                    if (j->p - a >= (long)sizeof tmp) return 0;
                    memcpy(tmp, a, (size_t)(j->p - a));
                    tmp[j->p - a] = 0;
                    lp = strtod(tmp, NULL);
                    have_lp = 1;
                } else if (!jskip(j, 2)) {
                    return 0;
                }
            }
            if (tr < 0 || !have_id) return 0;
            have_tok = 1;
        } else if (KEY("top_tokens")) {
            if (is_null(j)) continue;
            if (!lit(j, "[")) return 0;
            ws(j);
            if (!lit(j, "]")) return 0;
        } else if (KEY("generated_text")) {
            if (!is_null(j)) {
                if (!jskip(j, 1)) return 0;
                done = 1;
            }
        } else if (KEY("details")) {
            if (is_null(j)) continue;
            int df = 1, dr, any = 0;
            if (!jobj_begin(j)) return 0;
            while ((dr = jobj_next(j, &df, &k, &kn)) == 1) {
                const char *s;
                long long n;
                int esc;
                any = 1;
                if (KEY("finish_reason")) {
                    if (!str_or_null(j, &s, &n, &esc)) return 0;
                    if (n >= 0) {
                        if (esc || n >= (long long)sizeof finish) return 0;
                        memcpy(finish, s, (size_t)n);
                        finish[n] = 0;
                    }
                } else if (KEY("input_length")) {
                    if (!int_or_null(j, &prompt)) return 0;
                } else if (KEY("generated_tokens")) {
                    if (!int_or_null(j, &completion)) return 0;
                } else if (!jskip(j, 2)) {
                    return 0;
                }
            }
            if (dr < 0) return 0;
            done |= any;
        } else if (!jskip(j, 1)) {
            return 0;
        }
    }
    ws(j);
    if (r < 0 || j->p != j->e || !have_tok) return 0;
    if (buf_add(&f->ids, &tid, 8) || add_event(f, t, u, 1, sid)) return 0;
    if (have_lp && buf_add(&f->lps, &lp, 8)) return 0;
    if (done) {
        /* TGI's reasons -> the tool's (tgi.py FINISH) */
        const char *m = strcmp(finish, "eos_token") == 0 || strcmp(finish, "stop_sequence") == 0 ? "stop" : finish;
        if (*m) snprintf(f->finish, sizeof f->finish, "%s", m);
        if (prompt >= 0) f->prompt = prompt;
        if (completion >= 0) f->completion = completion;
        f->terminal = 1;
    }
    return 1;
}

/* ------------------------------------------------------------------ framing and the body */
static long long parse_sid(const char *s, size_t n) {
    while (n > 1 && *s == '0') { s++; n--; }
    if (n == 0 || n > 18) return FAST_NO_SID;
    long long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return FAST_NO_SID;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* one event block (no terminator): 1 parsed (or ignored after the terminal event), 0 bail */
static int fast_block(Fast *f, const char *b, size_t n, long long t, long long u) {
    if (!utf8_ok((const unsigned char *)b, n)) return 0;
    const char *val;
    size_t vn;
    long long sid = FAST_NO_SID;
    const char *nl = memchr(b, '\n', n);
    if (nl == NULL) { /* "data:V" */
        if (n < 5 || memcmp(b, "data:", 5) != 0) return 0;
        size_t s = (n > 5 && b[5] == ' ') ? 6 : 5;
        val = b + s;
        vn = n - s;
    } else { /* "id:I\ndata:V" */
        size_t jn = (size_t)(nl - b);
        if (jn < 3 || memcmp(b, "id:", 3) != 0 || n - jn - 1 < 5 || memcmp(nl + 1, "data:", 5) != 0) return 0;
        if (memchr(nl + 1, '\n', n - jn - 1) != NULL) return 0;
        size_t is = (jn > 3 && b[3] == ' ') ? 4 : 3;
        if (is > jn) return 0;
        sid = parse_sid(b + is, jn - is);
        size_t ds = jn + ((n > jn + 6 && b[jn + 6] == ' ') ? 7 : 6);
        val = b + ds;
        vn = n - ds;
    }
    if (f->terminal) return 1; /* EventSink parses nothing after the terminal event */
    /* an event that bails leaves nothing behind */
    size_t at[6] = {f->times.n, f->rx.n, f->counts.n, f->ids.n, f->sids.n, f->lps.n};
    char fin[sizeof f->finish];
    memcpy(fin, f->finish, sizeof fin);
    long long p = f->prompt, c = f->completion;
    J j = {val, val + vn};
    int ok = f->fmt == FAST_TGI ? parse_tgi(f, &j, t, u, sid) : parse_openai(f, &j, t, u, sid);
    if (!ok) {
        f->times.n = at[0]; f->rx.n = at[1]; f->counts.n = at[2]; f->ids.n = at[3]; f->sids.n = at[4]; f->lps.n = at[5];
        memcpy(f->finish, fin, sizeof fin);
        f->prompt = p;
        f->completion = c;
        f->terminal = 0;
    }
    return ok;
}

/* the head, scanned as it passes to Python: returns where the body starts in this read (>= 0),
   -1 (not complete yet) or -2 (not an SSE stream we parse: Python reads it all) */
static long long fast_head(Fast *f, const char *d, size_t n) {
    size_t before = f->head.n;
    size_t take = n < FAST_HEAD_MAX ? n : FAST_HEAD_MAX;
    if (before + take > FAST_HEAD_MAX || buf_add(&f->head, d, take) < 0) return -2;
    const char *h = f->head.p;
    size_t hn = f->head.n, end = 0;
    for (size_t i = before >= 3 ? before - 3 : 0; i + 3 < hn; i++)
        if (h[i] == '\r' && h[i + 1] == '\n' && h[i + 2] == '\r' && h[i + 3] == '\n') { end = i + 4; break; }
    if (end == 0) return -1;
    if (hn < 12 || memcmp(h, "HTTP/1.1 200", 12) != 0) return -2;
    int chunked = 0, sse = 0;
    const char *line = memchr(h, '\n', end) + 1;
    while (line < h + end - 2) {
        const char *eol = memchr(line, '\n', (size_t)(h + end - line));
        size_t ln = (size_t)(eol - line);
        if (ln > 18 && strncasecmp(line, "transfer-encoding:", 18) == 0 && memmem(line, ln, "chunked", 7)) chunked = 1;
        if (ln > 13 && strncasecmp(line, "content-type:", 13) == 0 && memmem(line, ln, "text/event-stream", 17)) sse = 1;
        if (ln > 15 && strncasecmp(line, "content-length:", 15) == 0) return -2;
        if (ln > 11 && strncasecmp(line, "connection:", 11) == 0)
            for (size_t i = 11; i + 5 <= ln; i++) /* (as Python: b"close" in the lowered value) */
                if (strncasecmp(line + i, "close", 5) == 0) f->close = 1;
        line = eol + 1;
    }
    if (!chunked || !sse) return -2;
    f->body = 1;
    return (long long)(end - before);
}

/* Python's path takes over: ``rest`` = de-chunked bytes from the failed event on (its first
   ``pend_len`` bytes came in earlier reads: stamps ev_t/ev_u; the others in this one: rest_t/rest_u),
   then ``line`` = raw chunk-coded bytes not decoded yet (Python's cbuf, with csize) */
static void fast_bail(Fast *f, size_t from, size_t pend_len, const char *raw, size_t raw_n, long long t, long long u) {
    f->rest.n = 0;
    f->pend_len = from < pend_len ? (long long)(pend_len - from) : 0;
    if (buf_add(&f->rest, f->ev.p + from, f->ev.n - from) < 0) f->rest.n = 0;
    if (raw_n) buf_add(&f->line, raw, raw_n);
    f->rest_t = t;
    f->rest_u = u;
    f->bailed = 1;
}

/* body bytes of one read; returns 1 when a result is ready (the body ended, or a bail) */
static int fast_feed(Fast *f, const char *d, size_t n, long long t, long long u) {
    f->last_u = u;
    size_t pend_len = f->ev.n, pos = 0;
    if (pend_len == 0) { f->ev_t = t; f->ev_u = u; }
    /* de-chunk into f->ev */
    while (pos < n && !f->ended) {
        if (f->csize == -1) {
            const char *nl = memchr(d + pos, '\n', n - pos);
            size_t k = nl ? (size_t)(nl - (d + pos)) + 1 : n - pos;
            if (f->line.n + k > 64 || buf_add(&f->line, d + pos, k) < 0) break;
            pos += k;
            if (!nl) return 0;
            const char *l = f->line.p;
            size_t ln = f->line.n, i = 0;
            long long size = 0;
            while (i < ln && ((l[i] >= '0' && l[i] <= '9') || ((l[i] | 32) >= 'a' && (l[i] | 32) <= 'f')) && i < 8) {
                char c = l[i++];
                size = size * 16 + (c <= '9' ? c - '0' : (c | 32) - 'a' + 10);
            }
            if (i == 0 || ln < 2 || l[ln - 2] != '\r' || (i != ln - 2 && l[i] != ';')) {
                pos -= k; /* a line Python's int(..., 16) may read otherwise: Python decides */
                f->line.n -= k;
                break;
            }
            f->line.n = 0;
            if (size == 0) { f->ended = 1; f->end_t = t; break; }
            f->csize = size;
        } else if (f->csize == -2) {
            size_t k = 2 - f->line.n < n - pos ? 2 - f->line.n : n - pos;
            buf_add(&f->line, d + pos, k);
            pos += k;
            if (f->line.n == 2) { f->line.n = 0; f->csize = -1; }
        } else {
            size_t k = (size_t)f->csize < n - pos ? (size_t)f->csize : n - pos;
            if (buf_add(&f->ev, d + pos, k) < 0) break;
            pos += k;
            f->csize -= (long long)k;
            if (f->csize == 0) f->csize = -2;
        }
    }
    const char *raw = d + pos;
    size_t raw_n = f->ended ? 0 : n - pos; /* > 0: de-chunking stopped early (bail below) */
    /* frame the events */
    size_t at = 0;
    const char *e = f->ev.p;
    if (f->ev.n && memchr(e, '\r', f->ev.n) != NULL) { fast_bail(f, 0, pend_len, raw, raw_n, t, u); return 1; }
    for (;;) {
        const char *q = f->ev.n - at >= 2 ? memmem(e + at, f->ev.n - at, "\n\n", 2) : NULL;
        if (q == NULL) break;
        size_t i = (size_t)(q - e);
        int from_earlier = at < pend_len;
        if (i == at || !fast_block(f, e + at, i - at, from_earlier ? f->ev_t : t, from_earlier ? f->ev_u : u)) {
            fast_bail(f, at, pend_len, raw, raw_n, t, u);
            return 1;
        }
        at = i + 2;
    }
    if (at >= pend_len && at > 0) { f->ev_t = t; f->ev_u = u; }
    if (at) {
        memmove(f->ev.p, e + at, f->ev.n - at);
        f->ev.n -= at;
    }
    if (raw_n || (f->ended && f->ev.n)) {
        /* stopped inside the chunk coding, or the body ended inside an event: Python's path says how */
        fast_bail(f, 0, f->ev.n, raw, raw_n, t, u); /* one unterminated event: stamped where it began */
        return 1;
    }
    return f->ended;
}

#endif
