/* Runs of pipelined one-partition Produce requests, handled per run rather than per request.
 *
 * A producer that sends one small batch per request (kafkactl bench --batch 1, a keyed stream to one
 * partition) pipelines many requests that differ only in their correlation id and batch. `scan` cuts
 * the longest such run from a connection's receive buffer; `stitch` copies the run's batches into one
 * buffer with their offsets and leader epoch assigned, and says where the offset and time indexes get
 * entries (the rule of broker/log/segment.py's `_note_batch`); `answers` writes every answer frame of
 * the run at once. broker/server/produce_run.py is the caller; anything `scan` does not take goes the
 * general way (broker/server/handlers), which stays the reference for every answer and log byte.
 *
 * The client's side is the mirror image: `build_requests` writes a run of such requests, one new batch
 * each, in one buffer (broker/client/producer.py's `_send_run`), and `scan_answers` reads the answers
 * that say "no error" with a base offset, a run of them at a time (broker/client/aio.py's read loop);
 * any other answer is decoded the general way (broker/protocol/messages/produce.py).
 *
 * A request of the run: size int32, header v1 (api_key 0, api_version 3..max, correlation_id,
 * client_id), a null transactional id, acks in {0, 1, -1}, timeout_ms, one topic with one partition,
 * and a record set that is exactly one RecordBatch v2: batch length + 12 == record set size, magic 2,
 * uncompressed, CreateTime, no transactional or control bit, at least one record, a last offset delta of
 * its record count - 1, a CRC-32C that matches, and records that agree with the header (walk_records:
 * count, offset deltas, the max timestamp). Version, acks, topic, partition and producer id are the same in every request of a run; an
 * idempotent producer's batches (producer id >= 0) also share its epoch, and each one's base sequence
 * follows on from the previous batch's last, so the caller checks only the first against the
 * partition's producer state.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../records/_batch_bytes.h"

/* one request of a run (`info` holds them back to back) */
typedef struct {
    int64_t position; /* the batch's first byte in the scanned buffer */
    int64_t max_ts;
    int32_t correlation_id;
    int32_t size; /* the batch's bytes */
    int32_t last_delta;
    int32_t count;
} Item;

/* scan(buf, start, end, max_frames, max_request_bytes, max_version, crc) -> None | tuple
 * The run at buf[start:end]: None when the first whole frame there is not one of a run, else
 * (frames, end position, version, acks, topic (bytes), partition, info, bytes, records, largest batch,
 *  producer id, producer epoch, first base sequence). */
static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, end;
    int max_frames, max_request_bytes, max_version;
    PyObject *crc;
    if (!PyArg_ParseTuple(args, "y*nniiiO", &view, &start, &end, &max_frames, &max_request_bytes, &max_version,
                          &crc))
        return NULL;
    PyObject *result = NULL;
    Item *items = NULL;
    if (start < 0 || end > view.len || start > end || max_frames < 1) {
        PyErr_SetString(PyExc_ValueError, "scan: bad bounds");
        goto done;
    }
    items = PyMem_Malloc(sizeof(Item) * (size_t)max_frames);
    if (!items) {
        PyErr_NoMemory();
        goto done;
    }
    const unsigned char *b = view.buf;
    const unsigned char *topic = NULL;
    int n = 0, version = 0, acks = 0, topic_len = 0, failed = 0;
    int32_t partition = 0, largest = 0, first_seq = -1;
    int64_t total = 0, records = 0, producer = -1, next_seq = 0;
    int producer_epoch = -1, client_len = -1;
    const unsigned char *client_id = NULL; /* the last client id found to be UTF-8 */
    Py_ssize_t pos = start;
    while (n < max_frames && end - pos >= 4) {
        int32_t size = s32(b + pos);
        if (size < 8 || size > max_request_bytes || size > end - pos - 4) break;
        const unsigned char *p = b + pos + 4, *fe = p + size;
#define NEED(k) if (fe - p < (k)) break
        NEED(10);
        int api = s16(p), ver = s16(p + 2);
        int32_t corr = s32(p + 4);
        int16_t client = s16(p + 8);
        p += 10;
        if (api != 0 || ver < 3 || ver > max_version || client < -1) break;
        if (client > 0) {
            NEED(client);
            if (!(client_len == client && memcmp(p, client_id, (size_t)client) == 0)) {
                /* the general path decodes it and closes the connection if it is not UTF-8 */
                PyObject *decoded = PyUnicode_DecodeUTF8((const char *)p, client, NULL);
                if (!decoded) {
                    PyErr_Clear();
                    break;
                }
                Py_DECREF(decoded);
                client_id = p, client_len = client;
            }
            p += client;
        }
        NEED(12);
        int16_t tid = s16(p), ack = s16(p + 2);
        int32_t topics = s32(p + 8);
        p += 12;
        if (tid != -1 || topics != 1 || (ack != 0 && ack != 1 && ack != -1)) break;
        NEED(2);
        int16_t tlen = s16(p);
        p += 2;
        if (tlen < 0) break;
        NEED(tlen + 12);
        const unsigned char *name = p;
        p += tlen;
        int32_t parts = s32(p), index = s32(p + 4), rsize = s32(p + 8);
        p += 12;
        if (parts != 1 || rsize < 61 || fe - p != rsize) break;
        const unsigned char *r = p;
        int attributes = s16(r + 21);
        int32_t last_delta = s32(r + 23), count = s32(r + 57);
        int64_t pid = s64(r + 43);
        int pepoch = s16(r + 51);
        int32_t seq = s32(r + 53);
        /* uncompressed CreateTime batches only (others go the general way, which decompresses them), and
         * the header checks of the general path (broker/log/log.py validate_batches) */
        if ((int64_t)s32(r + 8) + 12 != rsize || r[16] != 2 || (attributes & 0x3F) || last_delta < 0 || count <= 0 ||
            (int64_t)last_delta + 1 != count || (pid >= 0 && seq < 0))
            break;
        if (n == 0) {
            version = ver, acks = ack, topic = name, topic_len = tlen, partition = index;
            producer = pid, producer_epoch = pepoch, first_seq = seq;
        } else if (ver != version || ack != acks || tlen != topic_len || index != partition ||
                   memcmp(name, topic, (size_t)tlen) != 0 || pid != producer ||
                   (pid >= 0 && (pepoch != producer_epoch || seq != next_seq))) {
            break;
        }
        next_seq = ((int64_t)seq + last_delta + 1) % 2147483648LL; /* as the general path counts a batch's records */
        int ok = crc_matches(crc, r, rsize);
        if (ok < 0) {
            failed = 1;
            break;
        }
        if (!ok) break;
        int64_t records_max_ts;
        const char *why;
        if (walk_records(r + 61, rsize - 61, count, s64(r + 27), &records_max_ts, &why) < 0 ||
            records_max_ts != s64(r + 35))
            break; /* the general path: sets its max timestamp to the records' largest, or says why not */
#undef NEED
        Item *it = &items[n++];
        it->position = r - b;
        it->max_ts = s64(r + 35);
        it->correlation_id = corr;
        it->size = rsize;
        it->last_delta = last_delta;
        it->count = count;
        total += rsize;
        records += count;
        if (rsize > largest) largest = rsize;
        pos += 4 + (Py_ssize_t)size;
    }
    if (failed) goto done;
    if (n == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    result = Py_BuildValue("(iniiy#iy#LLiLii)", n, pos, version, acks, (const char *)topic, (Py_ssize_t)topic_len,
                           partition, (const char *)items, (Py_ssize_t)(sizeof(Item) * (size_t)n), (long long)total,
                           (long long)records, largest, (long long)producer, producer_epoch, first_seq);
done:
    PyMem_Free(items);
    PyBuffer_Release(&view);
    return result;
}

/* stitch(buf, info, first_offset, leader_epoch, position, since_index, interval, max_ts)
 *   -> (data, marks, since_index, max_ts, next_offset)
 * The run's batches back to back with base offsets from `first_offset` on; `marks` lists the
 * (last offset, position, largest timestamp so far) where the segment's indexes take an entry, for a
 * segment of `position` bytes, `since_index` bytes past its last entry and largest timestamp `max_ts`. */
static PyObject *stitch(PyObject *self, PyObject *args) {
    Py_buffer view, info;
    long long first, position, since, max_ts;
    int epoch, interval;
    if (!PyArg_ParseTuple(args, "y*y*LiLLiL", &view, &info, &first, &epoch, &position, &since, &interval, &max_ts))
        return NULL;
    PyObject *data = NULL, *marks = NULL, *result = NULL;
    const Item *items = info.buf;
    Py_ssize_t n = info.len / (Py_ssize_t)sizeof(Item), total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (items[i].position < 0 || items[i].size < 61 || items[i].position + items[i].size > view.len) {
            PyErr_SetString(PyExc_ValueError, "stitch: the info does not fit the buffer");
            goto done;
        }
        total += items[i].size;
    }
    data = PyBytes_FromStringAndSize(NULL, total);
    marks = PyList_New(0);
    if (!data || !marks) goto done;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(data);
    long long offset = first;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Item *it = &items[i];
        memcpy(o, (const unsigned char *)view.buf + it->position, (size_t)it->size);
        put(o, (uint64_t)offset, 8);
        put(o + 12, (uint32_t)epoch, 4);
        long long last = offset + it->last_delta;
        if (it->max_ts > max_ts) max_ts = it->max_ts;
        if (since > interval) {
            PyObject *mark = Py_BuildValue("(LLL)", last, position, max_ts);
            if (!mark || PyList_Append(marks, mark) < 0) {
                Py_XDECREF(mark);
                goto done;
            }
            Py_DECREF(mark);
            since = 0;
        }
        since += it->size;
        position += it->size;
        o += it->size;
        offset = last + 1;
    }
    result = Py_BuildValue("(OOLLL)", data, marks, since, max_ts, offset);
done:
    Py_XDECREF(data);
    Py_XDECREF(marks);
    PyBuffer_Release(&view);
    PyBuffer_Release(&info);
    return result;
}

/* answers(info, version, topic, partition, first_offset, log_start_offset) -> bytes
 * Every request's answer frame, in order: no error, its base offset, no log append time. */
static PyObject *answers(PyObject *self, PyObject *args) {
    Py_buffer info, topic;
    int version, partition;
    long long first, log_start;
    if (!PyArg_ParseTuple(args, "y*iy*iLL", &info, &version, &topic, &partition, &first, &log_start)) return NULL;
    PyObject *out = NULL;
    const Item *items = info.buf;
    Py_ssize_t n = info.len / (Py_ssize_t)sizeof(Item);
    Py_ssize_t body = 4 + 4 + 2 + topic.len + 4 + 4 + 2 + 8 + (version >= 2 ? 8 : 0) + (version >= 5 ? 8 : 0) +
                      (version >= 8 ? 6 : 0) + (version >= 1 ? 4 : 0);
    if (topic.len > INT16_MAX) {
        PyErr_SetString(PyExc_ValueError, "answers: topic name too long");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, n * (4 + body));
    if (!out) goto done;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    long long offset = first;
    for (Py_ssize_t i = 0; i < n; i++) {
        o = put(o, (uint32_t)body, 4);
        o = put(o, (uint32_t)items[i].correlation_id, 4);
        o = put(o, 1, 4);
        o = put(o, (uint16_t)topic.len, 2);
        memcpy(o, topic.buf, (size_t)topic.len);
        o += topic.len;
        o = put(o, 1, 4);
        o = put(o, (uint32_t)partition, 4);
        o = put(o, 0, 2);
        o = put(o, (uint64_t)offset, 8);
        if (version >= 2) o = put(o, (uint64_t)-1, 8); /* log append time: none (CreateTime) */
        if (version >= 5) o = put(o, (uint64_t)log_start, 8);
        if (version >= 8) {
            o = put(o, 0, 4);            /* record errors */
            o = put(o, (uint16_t)-1, 2); /* error message: null */
        }
        if (version >= 1) o = put(o, 0, 4); /* throttle time */
        offset += (long long)items[i].last_delta + 1;
    }
done:
    PyBuffer_Release(&info);
    PyBuffer_Release(&topic);
    return out;
}

/* the attribute names build_requests reads of a BatchBuilder, made once (PyInit) */
static PyObject *name_buf, *name_count, *name_base_ts, *name_max_ts;

static int attr_ll(PyObject *o, PyObject *name, long long *out) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (!v) return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* build_requests(version, first_cid, client_id, body_head, partition, builders, producer_id, producer_epoch,
 *                first_sequence, crc) -> bytes
 * One Produce request per BatchBuilder of `builders` (uncompressed: attributes 0), correlation ids
 * first_cid, first_cid + 1, ...: frame size, api key 0, `version`, the id, `client_id` (int16 length +
 * bytes), `body_head` (the body up to the partition index: null transactional id, acks, timeout, one
 * topic, one partition), `partition`, the record set's size, the batch (base offset 0, leader epoch -1,
 * sequences from `first_sequence` on when it is >= 0). BatchBuilder.build is the reference. */
static PyObject *build_requests(PyObject *self, PyObject *args) {
    int version, partition, epoch;
    long long cid, pid, seq;
    Py_buffer client, head;
    PyObject *builders, *crc;
    if (!PyArg_ParseTuple(args, "iLy*y*iOLiLO", &version, &cid, &client, &head, &partition, &builders, &pid, &epoch,
                          &seq, &crc))
        return NULL;
    PyObject *out = NULL, *bufs = NULL;
    long long *meta = NULL;
    if (!PyList_Check(builders)) {
        PyErr_SetString(PyExc_TypeError, "build_requests: builders must be a list");
        goto done;
    }
    Py_ssize_t n = PyList_GET_SIZE(builders), total = 0;
    Py_ssize_t fixed = 4 + 8 + client.len + head.len + 8 + 61;
    bufs = PyList_New(n);
    meta = PyMem_Malloc(sizeof(long long) * 4 * (size_t)(n ? n : 1));
    if (!bufs || !meta) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PyList_GET_ITEM(builders, i);
        PyObject *buf = PyObject_GetAttr(b, name_buf);
        if (!buf) goto done;
        PyList_SET_ITEM(bufs, i, buf);
        if (!PyByteArray_Check(buf)) {
            PyErr_SetString(PyExc_TypeError, "build_requests: a builder's buf must be a bytearray");
            goto done;
        }
        if (attr_ll(b, name_count, &meta[4 * i]) < 0 || attr_ll(b, name_base_ts, &meta[4 * i + 1]) < 0 ||
            attr_ll(b, name_max_ts, &meta[4 * i + 2]) < 0)
            goto done;
        meta[4 * i + 3] = PyByteArray_GET_SIZE(buf);
        if (meta[4 * i] < 1 || meta[4 * i] > INT32_MAX || meta[4 * i + 3] > INT32_MAX - 61) {
            PyErr_SetString(PyExc_ValueError, "build_requests: a batch holds 1 to 2**31-1 records, under 2 GiB");
            goto done;
        }
        total += fixed + PyByteArray_GET_SIZE(buf);
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) goto done;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *buf = PyList_GET_ITEM(bufs, i);
        Py_ssize_t rlen = (Py_ssize_t)meta[4 * i + 3], size = 61 + rlen;
        long long count = meta[4 * i];
        if (PyByteArray_GET_SIZE(buf) != rlen) { /* the crc callback ran Python code that changed it */
            PyErr_SetString(PyExc_RuntimeError, "build_requests: a batch changed while it was framed");
            goto fail;
        }
        o = put(o, (uint32_t)(fixed - 4 + rlen), 4);
        o = put(o, 0, 2);
        o = put(o, (uint16_t)version, 2);
        o = put(o, (uint32_t)((cid + i) & 0x7FFFFFFF), 4);
        memcpy(o, client.buf, (size_t)client.len);
        o += client.len;
        memcpy(o, head.buf, (size_t)head.len);
        o += head.len;
        o = put(o, (uint32_t)partition, 4);
        o = put(o, (uint32_t)size, 4);
        unsigned char *b = o;
        put(b, 0, 8);
        put(b + 8, (uint64_t)(size - 12), 4);
        put(b + 12, (uint32_t)-1, 4);
        b[16] = 2;
        put(b + 21, 0, 2);
        put(b + 23, (uint64_t)(count - 1), 4);
        put(b + 27, (uint64_t)meta[4 * i + 1], 8);
        put(b + 35, (uint64_t)meta[4 * i + 2], 8);
        put(b + 43, (uint64_t)pid, 8);
        put(b + 51, (uint16_t)epoch, 2);
        put(b + 53, (uint32_t)(seq >= 0 ? seq : -1), 4);
        put(b + 57, (uint64_t)count, 4);
        memcpy(b + 61, PyByteArray_AS_STRING(buf), (size_t)rlen);
        uint32_t value;
        if (batch_crc(crc, b, size, &value) < 0) goto fail;
        put(b + 17, value, 4);
        o = b + size;
        if (seq >= 0) seq = (seq + count) % 2147483648LL;
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    Py_XDECREF(bufs);
    PyMem_Free(meta);
    PyBuffer_Release(&client);
    PyBuffer_Release(&head);
    return out;
}

/* scan_answers(data, position, end, first_cid, max_count, version, topic, partition) -> (position, offsets)
 * The whole answer frames at data[position:end], up to max_count of them, with correlation ids
 * first_cid, first_cid + 1, ... that each answer `topic`'s `partition` alone with no error: their base
 * offsets, and the position after them. It stops at the first frame that is not one (or not whole). */
static PyObject *scan_answers(PyObject *self, PyObject *args) {
    Py_buffer data, topic;
    Py_ssize_t pos, end;
    long long cid;
    int max_count, version, partition;
    if (!PyArg_ParseTuple(args, "y*nnLiiy*i", &data, &pos, &end, &cid, &max_count, &version, &topic, &partition))
        return NULL;
    PyObject *offsets = PyList_New(0), *result = NULL;
    if (!offsets) goto done;
    if (pos < 0 || end > data.len || pos > end) {
        PyErr_SetString(PyExc_ValueError, "scan_answers: bad bounds");
        goto done;
    }
    const unsigned char *b = data.buf;
    Py_ssize_t body = 4 + 4 + 2 + topic.len + 4 + 4 + 2 + 8 + (version >= 2 ? 8 : 0) + (version >= 5 ? 8 : 0) +
                      (version >= 8 ? 6 : 0) + (version >= 1 ? 4 : 0);
    Py_ssize_t at_partition = 4 + 4 + 4 + 2 + topic.len + 4; /* from the frame's start */
    for (int i = 0; i < max_count && end - pos >= 4 + body; i++) {
        const unsigned char *f = b + pos;
        if (s32(f) != body || s32(f + 4) != (int32_t)((cid + i) & 0x7FFFFFFF) || s32(f + 8) != 1 ||
            s16(f + 12) != topic.len || memcmp(f + 14, topic.buf, (size_t)topic.len) != 0 ||
            s32(f + at_partition - 4) != 1 || s32(f + at_partition) != partition || s16(f + at_partition + 4) != 0)
            break;
        if (version >= 8 && (s32(f + 4 + body - 10) != 0 || s16(f + 4 + body - 6) != -1)) break;
        PyObject *offset = PyLong_FromLongLong(s64(f + at_partition + 6));
        if (!offset || PyList_Append(offsets, offset) < 0) {
            Py_XDECREF(offset);
            goto done;
        }
        Py_DECREF(offset);
        pos += 4 + body;
    }
    result = Py_BuildValue("(nO)", pos, offsets);
done:
    Py_XDECREF(offsets);
    PyBuffer_Release(&data);
    PyBuffer_Release(&topic);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "The run of one-partition Produce requests at the start of a buffer, or None."},
    {"stitch", stitch, METH_VARARGS, "A run's batches with their offsets assigned, and the index entries due."},
    {"answers", answers, METH_VARARGS, "Every answer frame of a run appended at first_offset."},
    {"build_requests", build_requests, METH_VARARGS, "A run of one-batch Produce requests in one buffer."},
    {"scan_answers", scan_answers, METH_VARARGS, "The base offsets of a run of no-error Produce answers."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_produce_run", NULL, -1, methods};

PyMODINIT_FUNC PyInit__produce_run(void) {
    name_buf = PyUnicode_InternFromString("buf");
    name_count = PyUnicode_InternFromString("count");
    name_base_ts = PyUnicode_InternFromString("base_ts");
    name_max_ts = PyUnicode_InternFromString("max_ts");
    if (!name_buf || !name_count || !name_base_ts || !name_max_ts) return NULL;
    return PyModule_Create(&module);
}
