"""DescribeClientQuotas (48) and AlterClientQuotas (49), KIP-546: client quotas by user and client id.

Kafka's DescribeClientQuotasRequest/Response.json and AlterClientQuotasRequest/Response.json; v1 is the
flexible form of v0. A quota value is a float64 (the only one in the protocol: a type of its own here).
"""

import struct
from typing import Any

from broker.protocol.primitives import Reader, Writer
from broker.protocol.schema import BOOLEAN, INT8, INT16, INT32, NULLABLE_STRING, STRING, Array, F, Struct, Type

#: `match_type` of a DescribeClientQuotas filter component
MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_ANY = 2

_F64 = struct.Struct(">d")


class _Float64(Type):
    """A big-endian IEEE 754 double (the same in flexible versions)."""

    default = 0.0
    name = "float64"

    def read(self, r: Reader, v: int) -> float:
        return _F64.unpack_from(r.buf, r._take(8))[0]

    def write(self, w: Writer, value: Any, v: int) -> None:
        w.buf += _F64.pack(float(value))


FLOAT64 = _Float64()

_ENTITY = Array(Struct(
    F("entity_type", STRING),
    F("entity_name", NULLABLE_STRING),
))  # fmt: skip

DESCRIBE_CLIENT_QUOTAS_REQUEST = Struct(
    F("components", Array(Struct(
        F("entity_type", STRING),
        F("match_type", INT8),
        F("match", NULLABLE_STRING),
    ))),
    F("strict", BOOLEAN),
    flexible_from=1,
)  # fmt: skip

DESCRIBE_CLIENT_QUOTAS_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", NULLABLE_STRING),
    F("entries", Array(Struct(
        F("entity", _ENTITY),
        F("values", Array(Struct(
            F("key", STRING),
            F("value", FLOAT64),
        ))),
    ), nullable_from=0)),
    flexible_from=1,
)  # fmt: skip

ALTER_CLIENT_QUOTAS_REQUEST = Struct(
    F("entries", Array(Struct(
        F("entity", _ENTITY),
        F("ops", Array(Struct(
            F("key", STRING),
            F("value", FLOAT64),
            F("remove", BOOLEAN),
        ))),
    ))),
    F("validate_only", BOOLEAN),
    flexible_from=1,
)  # fmt: skip

ALTER_CLIENT_QUOTAS_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("entries", Array(Struct(
        F("error_code", INT16),
        F("error_message", NULLABLE_STRING),
        F("entity", _ENTITY),
    ))),
    flexible_from=1,
)  # fmt: skip
