"""`columns_to_arrow` (the executor's path) gives exactly what `records_to_arrow` gives for the same
records: schema, values, null keys and values, and null (not empty) headers."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.client.consumer import decode_records
from broker.records import batch
from broker.records.batch import LOG_APPEND_TIME, Record, build_batch
from broker.records.columnar import decode_columns
from broker.records.compression import Codec
from broker.spark.source import ARROW_SCHEMA, ARROW_SCHEMA_WITHOUT_HEADERS, columns_to_arrow, records_to_arrow

TS = 1_700_000_000_000
maybe_bytes = st.none() | st.binary(max_size=30)
headers = st.lists(st.tuples(st.text(max_size=5), maybe_bytes), max_size=2).map(tuple)
batches = st.lists(st.tuples(st.lists(st.tuples(maybe_bytes, maybe_bytes, headers), min_size=1, max_size=6),
                             st.sampled_from(list(Codec)), st.booleans()), min_size=1, max_size=4)  # fmt: skip


@pytest.mark.parametrize("pure", [False, True])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=batches, include_headers=st.booleans(), data=st.data())
def test_same_batch_as_records_to_arrow(pure, specs, include_headers, data, monkeypatch) -> None:
    out, offset = [], 5
    for recs, codec, log_append in specs:
        rs = [Record(offset + i, TS + i, k, v, h) for i, (k, v, h) in enumerate(recs)]
        offset += len(recs) + 1
        out.append(build_batch(rs, codec=codec, timestamp_type=LOG_APPEND_TIME * log_append))
    buf = b"".join(out)
    stop = data.draw(st.integers(5, offset))
    with monkeypatch.context() as m:
        if pure:
            m.setattr(batch, "_codec", None)
        got = columns_to_arrow(decode_columns(buf, 0, stop), "topic", 3, include_headers)
    want = records_to_arrow([r for r in decode_records(buf, "topic", 3, 0) if r.offset < stop], include_headers)
    assert got.schema == (ARROW_SCHEMA if include_headers else ARROW_SCHEMA_WITHOUT_HEADERS)
    got.validate(full=True)
    assert got.to_pylist() == want.to_pylist()
    if include_headers:
        assert got.column("headers").null_count == sum(1 for r in want.column("headers").to_pylist() if r is None)
