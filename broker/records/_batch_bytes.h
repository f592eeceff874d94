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

#endif
