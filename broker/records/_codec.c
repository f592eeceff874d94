/* The record codec's hot loops in C: decoding a batch's records and appending one record to a
 * batch being built. broker/records/batch.py documents the format and holds the pure-Python
 * version of both, which is used when this extension is not built; tests check they agree. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static PyObject *CorruptRecordError = NULL;

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

/* append(buf, timestamp_delta, offset_delta, key, value, headers) -> None: one record onto a bytearray */
static PyObject *append(PyObject *self, PyObject *args) {
    PyObject *buf, *key, *value, *headers;
    long long ts_delta, off_delta;
    if (!PyArg_ParseTuple(args, "O!LLOOO", &PyByteArray_Type, &buf, &ts_delta, &off_delta, &key, &value, &headers))
        return NULL;
    const char *kp = NULL, *vp = NULL;
    Py_ssize_t kl = -1, vl = -1;
    if (key != Py_None) {
        if (!PyBytes_Check(key)) { PyErr_SetString(PyExc_TypeError, "key must be bytes or None"); return NULL; }
        kp = PyBytes_AS_STRING(key);
        kl = PyBytes_GET_SIZE(key);
    }
    if (value != Py_None) {
        if (!PyBytes_Check(value)) { PyErr_SetString(PyExc_TypeError, "value must be bytes or None"); return NULL; }
        vp = PyBytes_AS_STRING(value);
        vl = PyBytes_GET_SIZE(value);
    }
    PyObject *hseq = PySequence_Fast(headers, "headers must be a sequence of (name, value) pairs");
    if (!hseq) return NULL;
    Py_ssize_t nh = PySequence_Fast_GET_SIZE(hseq);
    /* headers first, into a scratch bytes object, to know the record's length */
    Py_ssize_t hsize = 10;
    for (Py_ssize_t i = 0; i < nh; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(hseq, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            Py_DECREF(hseq);
            PyErr_SetString(PyExc_TypeError, "a header is a (name, value) pair");
            return NULL;
        }
        Py_ssize_t n;
        if (!PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), &n)) { Py_DECREF(hseq); return NULL; }
        PyObject *hv = PyTuple_GET_ITEM(pair, 1);
        if (hv != Py_None && !PyBytes_Check(hv)) {
            Py_DECREF(hseq);
            PyErr_SetString(PyExc_TypeError, "a header value must be bytes or None");
            return NULL;
        }
        hsize += n + 20 + (hv == Py_None ? 0 : PyBytes_GET_SIZE(hv));
    }
    Py_ssize_t bound = 1 + 10 + 10 + 10 + (kl > 0 ? kl : 0) + 10 + (vl > 0 ? vl : 0) + hsize;
    unsigned char stack[512];
    unsigned char *body = bound <= (Py_ssize_t)sizeof stack ? stack : PyMem_Malloc(bound);
    if (!body) { Py_DECREF(hseq); return PyErr_NoMemory(); }
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
        return NULL;
    }
    char *dst = PyByteArray_AS_STRING(buf) + old;
    memcpy(dst, lenbuf, lq - lenbuf);
    memcpy(dst + (lq - lenbuf), body, blen);
    if (body != stack) PyMem_Free(body);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, "Decode a batch's records (see broker.records.batch.decode_records)."},
    {"append", append, METH_VARARGS, "Append one record to a batch's bytearray (see BatchBuilder.append)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_codec", NULL, -1, methods};

PyMODINIT_FUNC PyInit__codec(void) {
    PyObject *errors = PyImport_ImportModule("broker.errors");
    if (!errors) return NULL;
    CorruptRecordError = PyObject_GetAttrString(errors, "CorruptRecordError");
    Py_DECREF(errors);
    if (!CorruptRecordError) return NULL;
    return PyModule_Create(&module);
}
