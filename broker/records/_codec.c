/* The record codec's hot loops in C: decoding a batch's records, appending records to a batch
 * being built and then its header and CRC, and decoding a fetched record set into columns.
 * broker/records/batch.py documents the batch format and broker/records/columnar.py the columns;
 * both hold the pure-Python versions, used when this extension is not built; tests check they agree. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_batch_bytes.h"

static PyObject *CorruptRecordError = NULL;
static PyObject *InvalidRecordError = NULL;

static int corrupt(const char *msg) {
    PyErr_SetString(CorruptRecordError ? CorruptRecordError : PyExc_ValueError, msg);
    return -1;
}

/* zigzag varint at *p (< end); returns 0 and the value, or -1 with an error set */
static int read_varint(const unsigned char **p, const unsigned char *end, int64_t *out) {
    uint64_t n = 0;
    int shift = 0;
    const unsigned char *q = *p;
    while (1) {
        if (q >= end) return corrupt("truncated varint");
        unsigned char b = *q++;
        n |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) break;
        shift += 7;
        if (shift > 63) return corrupt("varint longer than 10 bytes");
    }
    *p = q;
    *out = (int64_t)((n >> 1) ^ (~(n & 1) + 1));
    return 0;
}

/* a length-prefixed byte string (-1: None) as a new reference, or NULL with an error set */
static PyObject *read_bytes(const unsigned char **p, const unsigned char *end, const char *what) {
    int64_t n;
    if (read_varint(p, end, &n) < 0) return NULL;
    if (n < 0) {
        if (n == -1) Py_RETURN_NONE;
        corrupt(what);
        return NULL;
    }
    if (n > end - *p) {
        corrupt("record field runs past the batch");
        return NULL;
    }
    PyObject *b = PyBytes_FromStringAndSize((const char *)*p, (Py_ssize_t)n);
    *p += n;
    return b;
}

/* decode(data, base_offset, base_timestamp, append_time, cls, prefix, suffix, expected) -> list
 * Each record is cls(*prefix, offset, timestamp, key, value, headers, attributes, *suffix), built
 * directly as a tuple of type cls (a tuple subclass such as a NamedTuple). append_time >= 0 stamps
 * every record with it (LogAppendTime batches). */
static PyObject *decode(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long base_offset, base_ts, append_ts;
    PyObject *cls, *prefix, *suffix;
    Py_ssize_t expected;
    if (!PyArg_ParseTuple(args, "y*LLLOO!O!n", &view, &base_offset, &base_ts, &append_ts, &cls, &PyTuple_Type,
                          &prefix, &PyTuple_Type, &suffix, &expected))
        return NULL;
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "cls must be a tuple type");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    Py_ssize_t npre = PyTuple_GET_SIZE(prefix), nsuf = PyTuple_GET_SIZE(suffix), width = npre + 6 + nsuf;
    const unsigned char *p = (const unsigned char *)view.buf, *end = p + view.len;
    PyObject *out = PyList_New(0);
    if (!out) goto fail;
    while (p < end) {
        int64_t length, ts_delta, off_delta, nheaders;
        if (read_varint(&p, end, &length) < 0) goto fail;
        if (length < 0 || length > end - p) {
            corrupt("record length runs past the batch");
            goto fail;
        }
        const unsigned char *rec_end = p + length;
        if (p >= rec_end) {
            corrupt("record runs past the batch");
            goto fail;
        }
        long attributes = *p++;
        if (read_varint(&p, rec_end, &ts_delta) < 0 || read_varint(&p, rec_end, &off_delta) < 0) goto fail;
        PyObject *key = read_bytes(&p, rec_end, "negative record key length");
        if (!key) goto fail;
        PyObject *value = read_bytes(&p, rec_end, "negative record value length");
        if (!value) {
            Py_DECREF(key);
            goto fail;
        }
        PyObject *headers = NULL;
        if (read_varint(&p, rec_end, &nheaders) < 0 || nheaders < 0 || nheaders > rec_end - p) {
            if (!PyErr_Occurred()) corrupt("record with a bad header count");
            goto fail_kv;
        }
        headers = PyTuple_New((Py_ssize_t)nheaders);
        if (!headers) goto fail_kv;
        for (int64_t i = 0; i < nheaders; i++) {
            int64_t hlen;
            if (read_varint(&p, rec_end, &hlen) < 0) goto fail_kvh;
            if (hlen < 0 || hlen > rec_end - p) {
                corrupt(hlen < 0 ? "record header with a null key" : "record header key runs past the batch");
                goto fail_kvh;
            }
            PyObject *hk = PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)hlen, "replace");
            if (!hk) goto fail_kvh;
            p += hlen;
            PyObject *hv = read_bytes(&p, rec_end, "negative record header value length");
            if (!hv) {
                Py_DECREF(hk);
                goto fail_kvh;
            }
            PyObject *pair = PyTuple_Pack(2, hk, hv);
            Py_DECREF(hk);
            Py_DECREF(hv);
            if (!pair) goto fail_kvh;
            PyObject_GC_UnTrack(pair); /* str and bytes only: no cycle can pass through it */
            PyTuple_SET_ITEM(headers, (Py_ssize_t)i, pair);
        }
        if (p != rec_end) {
            corrupt("record length disagrees with its fields");
            goto fail_kvh;
        }
        PyObject *rec = type->tp_alloc(type, width);
        if (!rec) goto fail_kvh;
        for (Py_ssize_t i = 0; i < npre; i++) {
            PyObject *x = PyTuple_GET_ITEM(prefix, i);
            Py_INCREF(x);
            PyTuple_SET_ITEM(rec, i, x);
        }
        PyObject *off = PyLong_FromLongLong(base_offset + off_delta);
        PyObject *ts = PyLong_FromLongLong(append_ts >= 0 ? append_ts : base_ts + ts_delta);
        PyObject *attrs = PyLong_FromLong(attributes);
        if (!off || !ts || !attrs) {
            Py_XDECREF(off);
            Py_XDECREF(ts);
            Py_XDECREF(attrs);
            Py_DECREF(rec);
            goto fail_kvh;
        }
        PyTuple_SET_ITEM(rec, npre, off);
        PyTuple_SET_ITEM(rec, npre + 1, ts);
        PyTuple_SET_ITEM(rec, npre + 2, key);
        PyTuple_SET_ITEM(rec, npre + 3, value);
        PyTuple_SET_ITEM(rec, npre + 4, headers);
        PyTuple_SET_ITEM(rec, npre + 5, attrs);
        for (Py_ssize_t i = 0; i < nsuf; i++) {
            PyObject *x = PyTuple_GET_ITEM(suffix, i);
            Py_INCREF(x);
            PyTuple_SET_ITEM(rec, npre + 6 + i, x);
        }
        /* A record holds only ints, bytes, str and tuples of them: the cycle collector has nothing to find
         * there, and leaving thousands of buffered records tracked makes every collection walk them. */
        if (nheaders > 0 && PyObject_GC_IsTracked(headers)) PyObject_GC_UnTrack(headers);
        int tracked_items = 0;
        for (Py_ssize_t i = 0; i < npre; i++)
            if (PyObject_GC_IsTracked(PyTuple_GET_ITEM(prefix, i))) tracked_items = 1;
        for (Py_ssize_t i = 0; i < nsuf; i++)
            if (PyObject_GC_IsTracked(PyTuple_GET_ITEM(suffix, i))) tracked_items = 1;
        if (!tracked_items) PyObject_GC_UnTrack(rec);
        int rc = PyList_Append(out, rec);
        Py_DECREF(rec);
        if (rc < 0) goto fail;
        continue;
    fail_kvh:
        Py_XDECREF(headers);
    fail_kv:
        Py_DECREF(key);
        Py_DECREF(value);
        goto fail;
    }
    if (PyList_GET_SIZE(out) != expected) {
        char msg[96];
        snprintf(msg, sizeof msg, "batch says %zd records but holds %zd", expected, PyList_GET_SIZE(out));
        corrupt(msg);
        goto fail;
    }
    PyBuffer_Release(&view);
    return out;
fail:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

static unsigned char *put_varint(unsigned char *q, int64_t v) {
    uint64_t n = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (n >= 0x80) {
        *q++ = (unsigned char)((n & 0x7F) | 0x80);
        n >>= 7;
    }
    *q++ = (unsigned char)n;
    return q;
}

/* one record onto the bytearray buf; 0, or -1 with an error set */
static int append_record(PyObject *buf, long long ts_delta, long long off_delta, PyObject *key, PyObject *value,
                         PyObject *headers) {
    const char *kp = NULL, *vp = NULL;
    Py_ssize_t kl = -1, vl = -1;
    if (key != Py_None) {
        if (!PyBytes_Check(key)) { PyErr_SetString(PyExc_TypeError, "key must be bytes or None"); return -1; }
        kp = PyBytes_AS_STRING(key);
        kl = PyBytes_GET_SIZE(key);
    }
    if (value != Py_None) {
        if (!PyBytes_Check(value)) { PyErr_SetString(PyExc_TypeError, "value must be bytes or None"); return -1; }
        vp = PyBytes_AS_STRING(value);
        vl = PyBytes_GET_SIZE(value);
    }
    PyObject *hseq = PySequence_Fast(headers, "headers must be a sequence of (name, value) pairs");
    if (!hseq) return -1;
    Py_ssize_t nh = PySequence_Fast_GET_SIZE(hseq);
    /* headers first, into a scratch bytes object, to know the record's length */
    Py_ssize_t hsize = 10;
    for (Py_ssize_t i = 0; i < nh; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(hseq, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            Py_DECREF(hseq);
            PyErr_SetString(PyExc_TypeError, "a header is a (name, value) pair");
            return -1;
        }
        Py_ssize_t n;
        if (!PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), &n)) { Py_DECREF(hseq); return -1; }
        PyObject *hv = PyTuple_GET_ITEM(pair, 1);
        if (hv != Py_None && !PyBytes_Check(hv)) {
            Py_DECREF(hseq);
            PyErr_SetString(PyExc_TypeError, "a header value must be bytes or None");
            return -1;
        }
        hsize += n + 20 + (hv == Py_None ? 0 : PyBytes_GET_SIZE(hv));
    }
    Py_ssize_t bound = 1 + 10 + 10 + 10 + (kl > 0 ? kl : 0) + 10 + (vl > 0 ? vl : 0) + hsize;
    unsigned char stack[512];
    unsigned char *body = bound <= (Py_ssize_t)sizeof stack ? stack : PyMem_Malloc(bound);
    if (!body) { Py_DECREF(hseq); { PyErr_NoMemory(); return -1; } }
    unsigned char *q = body;
    *q++ = 0; /* attributes */
    q = put_varint(q, ts_delta);
    q = put_varint(q, off_delta);
    q = put_varint(q, kl);
    if (kl > 0) { memcpy(q, kp, kl); q += kl; }
    q = put_varint(q, vl);
    if (vl > 0) { memcpy(q, vp, vl); q += vl; }
    q = put_varint(q, nh);
    for (Py_ssize_t i = 0; i < nh; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(hseq, i);
        Py_ssize_t n;
        const char *name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), &n);
        q = put_varint(q, n);
        memcpy(q, name, n);
        q += n;
        PyObject *hv = PyTuple_GET_ITEM(pair, 1);
        if (hv == Py_None) {
            q = put_varint(q, -1);
        } else {
            Py_ssize_t m = PyBytes_GET_SIZE(hv);
            q = put_varint(q, m);
            memcpy(q, PyBytes_AS_STRING(hv), m);
            q += m;
        }
    }
    Py_DECREF(hseq);
    Py_ssize_t blen = q - body;
    unsigned char lenbuf[10];
    unsigned char *lq = put_varint(lenbuf, blen);
    Py_ssize_t old = PyByteArray_GET_SIZE(buf);
    if (PyByteArray_Resize(buf, old + (lq - lenbuf) + blen) < 0) {
        if (body != stack) PyMem_Free(body);
        return -1;
    }
    char *dst = PyByteArray_AS_STRING(buf) + old;
    memcpy(dst, lenbuf, lq - lenbuf);
    memcpy(dst + (lq - lenbuf), body, blen);
    if (body != stack) PyMem_Free(body);
    return 0;
}

/* append(buf, timestamp_delta, offset_delta, key, value, headers) -> None: one record onto a bytearray */
static PyObject *append(PyObject *self, PyObject *args) {
    PyObject *buf, *key, *value, *headers;
    long long ts_delta, off_delta;
    if (!PyArg_ParseTuple(args, "O!LLOOO", &PyByteArray_Type, &buf, &ts_delta, &off_delta, &key, &value, &headers))
        return NULL;
    if (append_record(buf, ts_delta, off_delta, key, value, headers) < 0) return NULL;
    Py_RETURN_NONE;
}

/* append_many(buf, timestamp_delta, first_offset_delta, key, values, start, stop, limit, headers) -> int
 * Records of values[start:stop] (a list or tuple; one timestamp, key and headers) onto a bytearray, with
 * consecutive offset deltas, until the bytearray holds `limit` bytes; returns how many were appended
 * (at least one when start < stop). BatchBuilder.append_many is the caller and the Python version. */
static PyObject *append_many(PyObject *self, PyObject *args) {
    PyObject *buf, *key, *values, *headers;
    long long ts_delta, delta;
    Py_ssize_t start, stop, limit;
    if (!PyArg_ParseTuple(args, "O!LLOOnnnO", &PyByteArray_Type, &buf, &ts_delta, &delta, &key, &values, &start,
                          &stop, &limit, &headers))
        return NULL;
    PyObject *seq = PySequence_Fast(values, "values must be a sequence");
    if (!seq) return NULL;
    if (stop > PySequence_Fast_GET_SIZE(seq)) stop = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t j = start; j < stop; j++) { /* all or nothing: a bad value appends no record */
        PyObject *v = PySequence_Fast_GET_ITEM(seq, j);
        if (v != Py_None && !PyBytes_Check(v)) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_TypeError, "value must be bytes or None");
            return NULL;
        }
    }
    Py_ssize_t i = start;
    while (i < stop) {
        if (append_record(buf, ts_delta, delta, key, PySequence_Fast_GET_ITEM(seq, i), headers) < 0) {
            Py_DECREF(seq);
            return NULL;
        }
        i++;
        delta++;
        if (PyByteArray_GET_SIZE(buf) >= limit) break;
    }
    Py_DECREF(seq);
    return PyLong_FromSsize_t(i - start);
}

/* ---- decode_columns: fetched record sets straight into Arrow-layout column buffers ---------------- */

/* a bytearray grown by doubling: `len` bytes used of its size (the capacity) */
typedef struct {
    PyObject *obj;
    Py_ssize_t len;
} Vec;

static int vec_init(Vec *v, Py_ssize_t cap) {
    v->len = 0;
    v->obj = PyByteArray_FromStringAndSize(NULL, cap > 16 ? cap : 16);
    return v->obj ? 0 : -1;
}

static inline char *vec_reserve(Vec *v, Py_ssize_t extra) {
    Py_ssize_t cap = PyByteArray_GET_SIZE(v->obj);
    if (v->len + extra > cap) {
        Py_ssize_t want = cap * 2 > v->len + extra ? cap * 2 : v->len + extra;
        if (PyByteArray_Resize(v->obj, want) < 0) return NULL;
    }
    return PyByteArray_AS_STRING(v->obj) + v->len;
}

static inline int vec_put(Vec *v, const void *src, Py_ssize_t n) {
    char *q = vec_reserve(v, n);
    if (!q) return -1;
    memcpy(q, src, n);
    v->len += n;
    return 0;
}

/* the bytearray cut to its used length, handed over (the Vec lets go of it) */
static PyObject *vec_finish(Vec *v) {
    PyObject *obj = v->obj;
    v->obj = NULL;
    if (PyByteArray_Resize(obj, v->len) < 0) {
        Py_DECREF(obj);
        return NULL;
    }
    return obj;
}

/* an Arrow validity bitmap: bit i (least significant first) set when value i is not null */
typedef struct {
    Vec bits;
    Py_ssize_t n, nulls;
} Bitmap;

static inline int bitmap_push(Bitmap *b, int valid) {
    if ((b->n & 7) == 0) {
        char *q = vec_reserve(&b->bits, 1);
        if (!q) return -1;
        *q = 0;
        b->bits.len++;
    }
    if (valid)
        PyByteArray_AS_STRING(b->bits.obj)[b->n >> 3] |= (char)(1 << (b->n & 7));
    else
        b->nulls++;
    b->n++;
    return 0;
}

/* an Arrow binary (or utf8) column: validity, int32 offsets (n + 1), data */
typedef struct {
    Bitmap valid;
    Vec offsets, data;
} BinaryColumn;

static int binary_init(BinaryColumn *c, Py_ssize_t n, Py_ssize_t bytes) {
    int32_t zero = 0;
    c->valid.n = c->valid.nulls = 0;
    if (vec_init(&c->valid.bits, n / 8 + 1) < 0 || vec_init(&c->offsets, 4 * (n + 1)) < 0 ||
        vec_init(&c->data, bytes) < 0)
        return -1;
    return vec_put(&c->offsets, &zero, 4);
}

/* append one value (`n` < 0: null) */
static inline int binary_push(BinaryColumn *c, const unsigned char *p, int64_t n) {
    if (n > 0) {
        if (c->data.len + n > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "a column of more than 2 GiB");
            return -1;
        }
        if (vec_put(&c->data, p, (Py_ssize_t)n) < 0) return -1;
    }
    int32_t end = (int32_t)c->data.len;
    if (bitmap_push(&c->valid, n >= 0) < 0) return -1;
    return vec_put(&c->offsets, &end, 4);
}

/* (validity, offsets, data, null count), handed over */
static PyObject *binary_finish(BinaryColumn *c) {
    PyObject *v = vec_finish(&c->valid.bits), *o = vec_finish(&c->offsets), *d = vec_finish(&c->data);
    if (!v || !o || !d) {
        Py_XDECREF(v);
        Py_XDECREF(o);
        Py_XDECREF(d);
        return NULL;
    }
    return Py_BuildValue("(NNNn)", v, o, d, c->valid.nulls);
}

static void binary_free(BinaryColumn *c) {
    Py_CLEAR(c->valid.bits.obj);
    Py_CLEAR(c->offsets.obj);
    Py_CLEAR(c->data.obj);
}

typedef struct {
    Py_ssize_t count;
    Vec offsets, timestamps, types; /* int64, int64 (epoch ms), int32 */
    BinaryColumn keys, values;
    Bitmap has_headers;             /* the headers list is null for a record without headers */
    Vec header_offsets;             /* int32 (count + 1): record i's headers are entries [o[i], o[i+1]) */
    BinaryColumn header_keys, header_values;
    Py_ssize_t headers;             /* header entries so far */
} Columns;

static void columns_free(Columns *c) {
    Py_CLEAR(c->offsets.obj);
    Py_CLEAR(c->timestamps.obj);
    Py_CLEAR(c->types.obj);
    binary_free(&c->keys);
    binary_free(&c->values);
    Py_CLEAR(c->has_headers.bits.obj);
    Py_CLEAR(c->header_offsets.obj);
    binary_free(&c->header_keys);
    binary_free(&c->header_values);
}

static int columns_init(Columns *c, Py_ssize_t n, Py_ssize_t bytes) {
    int32_t zero = 0;
    memset(c, 0, sizeof *c);
    if (vec_init(&c->offsets, 8 * n) < 0 || vec_init(&c->timestamps, 8 * n) < 0 || vec_init(&c->types, 4 * n) < 0 ||
        binary_init(&c->keys, n, 16) < 0 || binary_init(&c->values, n, bytes) < 0 ||
        vec_init(&c->has_headers.bits, n / 8 + 1) < 0 || vec_init(&c->header_offsets, 4 * (n + 1)) < 0 ||
        vec_put(&c->header_offsets, &zero, 4) < 0 || binary_init(&c->header_keys, 0, 0) < 0 ||
        binary_init(&c->header_values, 0, 0) < 0)
        return -1;
    return 0;
}

/* a length-prefixed field as a pointer and length (-1: null) */
static inline int read_field(const unsigned char **p, const unsigned char *end, const unsigned char **out, int64_t *n,
                             const char *what) {
    if (read_varint(p, end, n) < 0) return -1;
    if (*n < 0) {
        if (*n != -1) return corrupt(what);
        *out = NULL;
        return 0;
    }
    if (*n > end - *p) return corrupt("record field runs past the batch");
    *out = *p;
    *p += *n;
    return 0;
}

/* a header name as the row decoder gives it: UTF-8, invalid sequences replaced by U+FFFD */
static int push_header_key(BinaryColumn *c, const unsigned char *p, int64_t n) {
    int ascii = 1;
    for (int64_t i = 0; i < n; i++)
        if (p[i] & 0x80) ascii = 0;
    if (ascii) return binary_push(c, p, n);
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)n, "replace");
    if (!s) return -1;
    Py_ssize_t m;
    const char *u = PyUnicode_AsUTF8AndSize(s, &m);
    int rc = u ? binary_push(c, (const unsigned char *)u, m) : -1;
    Py_DECREF(s);
    return rc;
}

/* the records of one batch body with position <= offset < stop onto the columns; all are checked */
static int decode_batch_columns(Columns *c, const unsigned char *p, const unsigned char *end, int64_t base_offset,
                                int64_t base_ts, int log_append, int64_t max_ts, int64_t position, int64_t stop,
                                int32_t expected) {
    int32_t type = log_append ? 1 : 0;
    int64_t seen = 0;
    while (p < end) {
        int64_t length, ts_delta, off_delta, nheaders, kl, vl;
        const unsigned char *kp, *vp;
        if (read_varint(&p, end, &length) < 0) return -1;
        if (length < 0 || length > end - p) return corrupt("record length runs past the batch");
        const unsigned char *rec_end = p + length;
        if (p >= rec_end) return corrupt("record runs past the batch");
        p++; /* attributes */
        if (read_varint(&p, rec_end, &ts_delta) < 0 || read_varint(&p, rec_end, &off_delta) < 0) return -1;
        if (read_field(&p, rec_end, &kp, &kl, "negative record key length") < 0 ||
            read_field(&p, rec_end, &vp, &vl, "negative record value length") < 0)
            return -1;
        if (read_varint(&p, rec_end, &nheaders) < 0) return -1;
        if (nheaders < 0 || nheaders > rec_end - p) return corrupt("record with a bad header count");
        int64_t offset = base_offset + off_delta;
        int keep = offset >= position && offset < stop;
        for (int64_t i = 0; i < nheaders; i++) {
            int64_t hl, hvl;
            const unsigned char *hp, *hvp;
            if (read_varint(&p, rec_end, &hl) < 0) return -1;
            if (hl < 0 || hl > rec_end - p)
                return corrupt(hl < 0 ? "record header with a null key" : "record header key runs past the batch");
            hp = p;
            p += hl;
            if (read_field(&p, rec_end, &hvp, &hvl, "negative record header value length") < 0) return -1;
            if (keep && (push_header_key(&c->header_keys, hp, hl) < 0 || binary_push(&c->header_values, hvp, hvl) < 0))
                return -1;
        }
        if (p != rec_end) return corrupt("record length disagrees with its fields");
        seen++;
        if (!keep) continue;
        int64_t ts = log_append ? max_ts : base_ts + ts_delta;
        c->headers += nheaders;
        if (c->headers > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "more than 2**31 headers");
            return -1;
        }
        int32_t hend = (int32_t)c->headers;
        if (vec_put(&c->offsets, &offset, 8) < 0 || vec_put(&c->timestamps, &ts, 8) < 0 ||
            vec_put(&c->types, &type, 4) < 0 || binary_push(&c->keys, kp, kl) < 0 ||
            binary_push(&c->values, vp, vl) < 0 || bitmap_push(&c->has_headers, nheaders > 0) < 0 ||
            vec_put(&c->header_offsets, &hend, 4) < 0)
            return -1;
        c->count++;
    }
    if (seen != expected) {
        char msg[96];
        snprintf(msg, sizeof msg, "batch says %d records but holds %lld", (int)expected, (long long)seen);
        return corrupt(msg);
    }
    return 0;
}

/* decode_columns(data, position, stop, crc, inflate) -> tuple
 * The records of a fetched record set with position <= offset < stop, as the columns
 * broker/records/columnar.py describes: (count, offsets, timestamps, timestamp types, keys, values,
 * headers or None). Batches from the first one starting at or after `stop` on, and a trailing partial
 * batch, are not looked at; every other batch must pass crc(memoryview) == its CRC; control batches
 * are skipped; a compressed batch's records are inflate(codec, memoryview). */
static PyObject *decode_columns(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long position, stop;
    PyObject *crc, *inflate;
    if (!PyArg_ParseTuple(args, "y*LLOO", &view, &position, &stop, &crc, &inflate)) return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t len = view.len, pos = 0, est_n = 0, est_bytes = 0;
    Columns c;
    while (len - pos >= 61) { /* size the buffers from the batch headers */
        int32_t blen = s32(buf + pos + 8), n = s32(buf + pos + 57);
        if (blen < 49 || blen > len - pos - 12 || s64(buf + pos) >= stop) break;
        est_n += n > 0 && n < blen ? n : 0;
        est_bytes += blen;
        pos += 12 + (Py_ssize_t)blen;
    }
    if (columns_init(&c, est_n, est_bytes) < 0) goto fail;
    pos = 0;
    while (len - pos >= 61) {
        const unsigned char *b = buf + pos;
        int64_t base_offset = s64(b);
        int32_t blen = s32(b + 8);
        Py_ssize_t size = 12 + (Py_ssize_t)blen;
        if (size > len - pos || base_offset >= stop) break;
        char msg[96];
        if (b[16] != 2) {
            snprintf(msg, sizeof msg, "batch at offset %lld has magic %d", (long long)base_offset, (int)b[16]);
            corrupt(msg);
            goto fail;
        }
        if (blen < 49) {
            snprintf(msg, sizeof msg, "batch at offset %lld has length %d", (long long)base_offset, (int)blen);
            corrupt(msg);
            goto fail;
        }
        int ok = crc_matches(crc, b, size);
        if (ok < 0) goto fail;
        if (!ok) {
            snprintf(msg, sizeof msg, "batch at offset %lld fails its CRC", (long long)base_offset);
            corrupt(msg);
            goto fail;
        }
        int attributes = (b[21] << 8) | b[22];
        int64_t last_offset = base_offset + s32(b + 23);
        pos += size;
        if ((attributes & 0x20) || last_offset < position) continue; /* control batch, or all below position */
        int log_append = (attributes & 0x08) != 0, codec = attributes & 0x07, rc;
        int64_t base_ts = s64(b + 27), max_ts = s64(b + 35);
        int32_t expected = s32(b + 57);
        if (codec == 0) {
            rc = decode_batch_columns(&c, b + 61, b + size, base_offset, base_ts, log_append, max_ts, position, stop,
                                      expected);
        } else {
            PyObject *mv = PyMemoryView_FromMemory((char *)b + 61, size - 61, PyBUF_READ);
            PyObject *records = mv ? PyObject_CallFunction(inflate, "iO", codec, mv) : NULL;
            Py_XDECREF(mv);
            if (!records) goto fail;
            Py_buffer rv;
            if (PyObject_GetBuffer(records, &rv, PyBUF_SIMPLE) < 0) {
                Py_DECREF(records);
                goto fail;
            }
            const unsigned char *r = (const unsigned char *)rv.buf;
            rc = decode_batch_columns(&c, r, r + rv.len, base_offset, base_ts, log_append, max_ts, position, stop,
                                      expected);
            PyBuffer_Release(&rv);
            Py_DECREF(records);
        }
        if (rc < 0) goto fail;
    }
    PyBuffer_Release(&view);
    PyObject *headers = Py_None, *keys = binary_finish(&c.keys), *values = binary_finish(&c.values);
    Py_INCREF(Py_None);
    if (c.headers > 0) {
        Py_DECREF(Py_None);
        PyObject *hv = vec_finish(&c.has_headers.bits), *ho = vec_finish(&c.header_offsets);
        PyObject *hk = binary_finish(&c.header_keys), *hvals = binary_finish(&c.header_values);
        if (hv && ho && hk && hvals) {
            headers = Py_BuildValue("(NnNNN)", hv, c.has_headers.nulls, ho, hk, hvals);
        } else {
            Py_XDECREF(hv);
            Py_XDECREF(ho);
            Py_XDECREF(hk);
            Py_XDECREF(hvals);
            headers = NULL;
        }
    }
    PyObject *o = vec_finish(&c.offsets), *t = vec_finish(&c.timestamps), *ty = vec_finish(&c.types);
    Py_ssize_t count = c.count;
    columns_free(&c);
    if (!headers || !keys || !values || !o || !t || !ty) {
        Py_XDECREF(headers);
        Py_XDECREF(keys);
        Py_XDECREF(values);
        Py_XDECREF(o);
        Py_XDECREF(t);
        Py_XDECREF(ty);
        return NULL;
    }
    return Py_BuildValue("(nNNNNNN)", count, o, t, ty, keys, values, headers);
fail:
    columns_free(&c);
    PyBuffer_Release(&view);
    return NULL;
}

/* --- building a batch ---------------------------------------------------------------------------- */

/* build_batch(lead, records, count, base_ts, max_ts, producer_id, producer_epoch, base_sequence,
 *             attributes, crc) -> bytes
 * `lead` (say, a request's head) followed by a RecordBatch v2 of the encoded `records` (compressed
 * already when `attributes` says so): base offset 0, partition leader epoch -1, the CRC-32C given by
 * `crc(memoryview) -> int`. BatchBuilder.build is the caller and the Python version. */
static PyObject *build_batch(PyObject *self, PyObject *args) {
    Py_buffer lead, recs;
    long long count, base_ts, max_ts, pid;
    int epoch, seq, attributes;
    PyObject *crc;
    if (!PyArg_ParseTuple(args, "y*y*LLLLiiiO", &lead, &recs, &count, &base_ts, &max_ts, &pid, &epoch, &seq,
                          &attributes, &crc))
        return NULL;
    PyObject *out = NULL;
    Py_ssize_t size = 61 + recs.len;
    if (count < 1 || count > INT32_MAX || size > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "a batch holds 1 to 2**31-1 records and under 2 GiB");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, lead.len + size);
    if (!out) goto done;
    unsigned char *b = (unsigned char *)PyBytes_AS_STRING(out);
    memcpy(b, lead.buf, lead.len);
    b += lead.len;
    put(b, 0, 8);                               /* base offset: the broker assigns it */
    put(b + 8, (uint64_t)(size - 12), 4);       /* batch length: what follows it */
    put(b + 12, (uint32_t)-1, 4);               /* partition leader epoch */
    b[16] = 2;                                     /* magic */
    put(b + 21, (uint16_t)attributes, 2);
    put(b + 23, (uint64_t)(count - 1), 4);      /* last offset delta */
    put(b + 27, (uint64_t)base_ts, 8);
    put(b + 35, (uint64_t)max_ts, 8);
    put(b + 43, (uint64_t)pid, 8);
    put(b + 51, (uint16_t)epoch, 2);
    put(b + 53, (uint32_t)seq, 4);
    put(b + 57, (uint64_t)count, 4);
    memcpy(b + 61, recs.buf, recs.len);
    uint32_t value;
    if (batch_crc(crc, b, size, &value) < 0) goto fail;
    put(b + BATCH_CRC_AT, value, 4);
    goto done;
fail:
    Py_CLEAR(out);
done:
    PyBuffer_Release(&lead);
    PyBuffer_Release(&recs);
    return out;
}

/* check_records(data, start, end, count, base_timestamp) -> max timestamp
 * Kafka's record-level checks of a v2 batch (walk_records in _batch_bytes.h) on its uncompressed
 * records, data[start:end]; raises InvalidRecordError naming what does not hold. */
static PyObject *check_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, end;
    long long count, base_ts;
    if (!PyArg_ParseTuple(args, "y*nnLL", &view, &start, &end, &count, &base_ts)) return NULL;
    if (start < 0 || end > view.len || start > end) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "check_records: bad bounds");
        return NULL;
    }
    int64_t max_ts = 0;
    const char *why = NULL;
    int bad = walk_records((const unsigned char *)view.buf + start, end - start, count, base_ts, &max_ts, &why);
    PyBuffer_Release(&view);
    if (bad) {
        PyErr_SetString(InvalidRecordError, why);
        return NULL;
    }
    return PyLong_FromLongLong(max_ts);
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, "Decode a batch's records (see broker.records.batch.decode_records)."},
    {"append", append, METH_VARARGS, "Append one record to a batch's bytearray (see BatchBuilder.append)."},
    {"append_many", append_many, METH_VARARGS, "Append records of one key (see BatchBuilder.append_many)."},
    {"build_batch", build_batch, METH_VARARGS, "A request head and a whole batch (see BatchBuilder.build)."},
    {"check_records", check_records, METH_VARARGS, "Kafka's checks of a batch's records (see batch.check_records)."},
    {"decode_columns", decode_columns, METH_VARARGS,
     "Decode a fetched record set into columns (see broker.records.columnar.decode_columns)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_codec", NULL, -1, methods};

PyMODINIT_FUNC PyInit__codec(void) {
    PyObject *errors = PyImport_ImportModule("broker.errors");
    if (!errors) return NULL;
    CorruptRecordError = PyObject_GetAttrString(errors, "CorruptRecordError");
    InvalidRecordError = PyObject_GetAttrString(errors, "InvalidRecordError");
    Py_DECREF(errors);
    if (!CorruptRecordError || !InvalidRecordError) return NULL;
    return PyModule_Create(&module);
}
