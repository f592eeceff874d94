/* Big-endian field reads and writes, and the CRC-32C of a RecordBatch v2, for the C modules
 * (broker/records/_codec.c, broker/protocol/_produce_run.c). The batch layout is documented once, in
 * broker/records/batch.py: the CRC sits at byte 17 and covers the batch from its attributes (byte 21)
 * to its end. The CRC function is the caller's Python callable (crc(memoryview) -> int), so the C
 * modules use whichever CRC-32C implementation broker/records/crc.py picked.
 */
#ifndef KAFKACTL_BATCH_BYTES_H
#define KAFKACTL_BATCH_BYTES_H

#include <Python.h>
#include <stdint.h>
#include <limits.h>

#define BATCH_CRC_AT 17
#define BATCH_CRC_FROM 21

static inline uint32_t u32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline int32_t s32(const unsigned char *p) { return (int32_t)u32(p); }
static inline int16_t s16(const unsigned char *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }
static inline int64_t s64(const unsigned char *p) { return (int64_t)(((uint64_t)u32(p) << 32) | u32(p + 4)); }

/* write the low `n` bytes of v at p, big-endian; returns p + n */
static inline unsigned char *put(unsigned char *p, uint64_t v, int n) {
    for (int i = n - 1; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xFF);
        v >>= 8;
    }
    return p + n;
}

/* *out = crc(the batch at `batch`, `size` bytes, from its attributes on): 0, or -1 with an exception set */
static int batch_crc(PyObject *crc, const unsigned char *batch, Py_ssize_t size, uint32_t *out) {
    PyObject *mv = PyMemoryView_FromMemory((char *)batch + BATCH_CRC_FROM, size - BATCH_CRC_FROM, PyBUF_READ);
    if (!mv) return -1;
    PyObject *got = PyObject_CallOneArg(crc, mv);
    Py_DECREF(mv);
    if (!got) return -1;
    unsigned long value = PyLong_AsUnsignedLong(got);
    Py_DECREF(got);
    if (value == (unsigned long)-1 && PyErr_Occurred()) return -1;
    *out = (uint32_t)value;
    return 0;
}

/* the batch's stored CRC matches its contents: 1; it does not: 0; error: -1 */
static int crc_matches(PyObject *crc, const unsigned char *batch, Py_ssize_t size) {
    uint32_t value;
    if (batch_crc(crc, batch, size, &value) < 0) return -1;
    return value == u32(batch + BATCH_CRC_AT);
}

/* zigzag varint of at most `max_bytes` bytes at *p (< end) into *out; 0, or -1 when it runs past `end` or
 * is too long. No Python: the record walk below runs on the broker's produce path for every record. */
static inline int walk_varint(const unsigned char **p, const unsigned char *end, int max_bytes, int64_t *out) {
    uint64_t raw = 0;
    const unsigned char *q = *p;
    if (q < end && !(*q & 0x80)) { /* one byte: almost every delta, count and short length */
        raw = *q;
        *p = q + 1;
        *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
        return 0;
    }
    for (int i = 0; i < max_bytes; i++) {
        if (q >= end) return -1;
        unsigned char b = *q++;
        raw |= (uint64_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            *p = q;
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 0;
        }
    }
    return -1;
}

/* Kafka's checks of a v2 batch's records against its header (LogValidator): `len` bytes of records
 * (decompressed) hold exactly `count` records with offset deltas 0, 1, ..., count - 1, every length and
 * count within its record, and *max_ts is set to the largest base_ts + timestampDelta. Returns 0, or -1
 * with *why saying what does not hold. */
static int walk_records(const unsigned char *p, Py_ssize_t len, int64_t count, int64_t base_ts, int64_t *max_ts,
                        const char **why) {
    const unsigned char *end = p + len;
    int64_t n = 0, best = INT64_MIN;
    while (p < end) {
        int64_t length, ts_delta, off_delta, klen, vlen, nheaders;
        if (n >= count) { *why = "more records than the batch's record count"; return -1; }
        if (walk_varint(&p, end, 5, &length) < 0 || length < 0 || length > end - p) {
            *why = "a record's length runs past the batch"; return -1;
        }
        const unsigned char *rec_end = p + length;
        if (length < 1) { *why = "a record too short for its attributes"; return -1; }
        p++; /* attributes */
        if (walk_varint(&p, rec_end, 10, &ts_delta) < 0 || walk_varint(&p, rec_end, 5, &off_delta) < 0) {
            *why = "a record's timestamp or offset delta does not decode"; return -1;
        }
        if (off_delta != n) { *why = "record offset deltas are not 0, 1, 2, ... as the batch's count says"; return -1; }
        int64_t ts;
        if (__builtin_add_overflow(base_ts, ts_delta, &ts)) { *why = "a record timestamp overflows"; return -1; }
        if (ts > best) best = ts;
        if (walk_varint(&p, rec_end, 5, &klen) < 0 || klen < -1 || klen > rec_end - p) {
            *why = "a record's key runs past the record"; return -1;
        }
        if (klen > 0) p += klen;
        if (walk_varint(&p, rec_end, 5, &vlen) < 0 || vlen < -1 || vlen > rec_end - p) {
            *why = "a record's value runs past the record"; return -1;
        }
        if (vlen > 0) p += vlen;
        if (walk_varint(&p, rec_end, 5, &nheaders) < 0 || nheaders < 0 || nheaders > rec_end - p) {
            *why = "a record's header count is invalid"; return -1;
        }
        for (int64_t h = 0; h < nheaders; h++) {
            int64_t hk, hv;
            if (walk_varint(&p, rec_end, 5, &hk) < 0 || hk < 0 || hk > rec_end - p) {
                *why = "a header key runs past the record"; return -1;
            }
            p += hk;
            if (walk_varint(&p, rec_end, 5, &hv) < 0 || hv < -1 || hv > rec_end - p) {
                *why = "a header value runs past the record"; return -1;
            }
            if (hv > 0) p += hv;
        }
        if (p != rec_end) { *why = "a record's length disagrees with its fields"; return -1; }
        n++;
    }
    if (n != count) { *why = "fewer records than the batch's record count"; return -1; }
    *max_ts = best;
    return 0;
}

#endif
