"""SaslHandshake (17), SaslAuthenticate (36), DescribeAcls (29), CreateAcls (30) and DeleteAcls (31), in
their non-flexible versions (0-1 each); DescribeUserScramCredentials (50) and AlterUserScramCredentials (51),
v0 (flexible), whose SCRAM mechanism is an int8: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512 (0 unknown).

After SaslHandshake v0 a client sends its SASL tokens as bare size-prefixed frames, with no request
header (Kafka 0.10's way, still used by older clients); after v1 it wraps each in SaslAuthenticate.

ACL enums are Kafka's: resource type (1 ANY, 2 TOPIC, 3 GROUP, 4 CLUSTER, 5 TRANSACTIONAL_ID,
6 DELEGATION_TOKEN), pattern type (1 ANY, 2 MATCH, 3 LITERAL, 4 PREFIXED), operation (1 ANY, 2 ALL,
3 READ, 4 WRITE, 5 CREATE, 6 DELETE, 7 ALTER, 8 DESCRIBE, 9 CLUSTER_ACTION, 10 DESCRIBE_CONFIGS,
11 ALTER_CONFIGS, 12 IDEMPOTENT_WRITE), permission (1 ANY, 2 DENY, 3 ALLOW).
"""

from broker.protocol.schema import BYTES, INT8, INT16, INT32, INT64, NULLABLE_STRING, STRING, Array, F, Struct

SASL_HANDSHAKE_REQUEST = Struct(F("mechanism", STRING))

SASL_HANDSHAKE_RESPONSE = Struct(F("error_code", INT16), F("mechanisms", Array(STRING)))

SASL_AUTHENTICATE_REQUEST = Struct(F("auth_bytes", BYTES), flexible_from=2)

SASL_AUTHENTICATE_RESPONSE = Struct(
    F("error_code", INT16),
    F("error_message", NULLABLE_STRING),
    F("auth_bytes", BYTES),
    F("session_lifetime_ms", INT64, "1+"),
    flexible_from=2,
)

_LITERAL = 3  # a v0 request or answer knows literal resource names only

_FILTER = (
    F("resource_type_filter", INT8),
    F("resource_name_filter", NULLABLE_STRING),
    F("pattern_type_filter", INT8, "1+", default=_LITERAL),
    F("principal_filter", NULLABLE_STRING),
    F("host_filter", NULLABLE_STRING),
    F("operation", INT8),
    F("permission_type", INT8),
)

DESCRIBE_ACLS_REQUEST = Struct(*_FILTER, flexible_from=2)

DESCRIBE_ACLS_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", NULLABLE_STRING),
    F(
        "resources",
        Array(
            Struct(
                F("resource_type", INT8),
                F("resource_name", STRING),
                F("pattern_type", INT8, "1+", default=_LITERAL),
                F(
                    "acls",
                    Array(
                        Struct(
                            F("principal", STRING),
                            F("host", STRING),
                            F("operation", INT8),
                            F("permission_type", INT8),
                        )
                    ),
                ),
            )
        ),
    ),
    flexible_from=2,
)

CREATE_ACLS_REQUEST = Struct(
    F(
        "creations",
        Array(
            Struct(
                F("resource_type", INT8),
                F("resource_name", STRING),
                F("resource_pattern_type", INT8, "1+", default=_LITERAL),
                F("principal", STRING),
                F("host", STRING),
                F("operation", INT8),
                F("permission_type", INT8),
            )
        ),
    ),
    flexible_from=2,
)

CREATE_ACLS_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("results", Array(Struct(F("error_code", INT16), F("error_message", NULLABLE_STRING)))),
    flexible_from=2,
)

DELETE_ACLS_REQUEST = Struct(F("filters", Array(Struct(*_FILTER))), flexible_from=2)

DELETE_ACLS_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F(
        "filter_results",
        Array(
            Struct(
                F("error_code", INT16),
                F("error_message", NULLABLE_STRING),
                F(
                    "matching_acls",
                    Array(
                        Struct(
                            F("error_code", INT16),
                            F("error_message", NULLABLE_STRING),
                            F("resource_type", INT8),
                            F("resource_name", STRING),
                            F("pattern_type", INT8, "1+", default=_LITERAL),
                            F("principal", STRING),
                            F("host", STRING),
                            F("operation", INT8),
                            F("permission_type", INT8),
                        )
                    ),
                ),
            )
        ),
    ),
    flexible_from=2,
)


DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST = Struct(
    F("users", Array(Struct(F("name", STRING)), nullable_from=0)),  # (null or empty: every user)
    flexible_from=0,
)

DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", NULLABLE_STRING),
    F("results", Array(Struct(
        F("user", STRING),
        F("error_code", INT16),
        F("error_message", NULLABLE_STRING),
        F("credential_infos", Array(Struct(F("mechanism", INT8), F("iterations", INT32)))),
    ))),
    flexible_from=0,
)  # fmt: skip

ALTER_USER_SCRAM_CREDENTIALS_REQUEST = Struct(
    F("deletions", Array(Struct(F("name", STRING), F("mechanism", INT8)))),
    F("upsertions", Array(Struct(
        F("name", STRING),
        F("mechanism", INT8),
        F("iterations", INT32),
        F("salt", BYTES),
        F("salted_password", BYTES),
    ))),
    flexible_from=0,
)  # fmt: skip

ALTER_USER_SCRAM_CREDENTIALS_RESPONSE = Struct(
    F("throttle_time_ms", INT32),
    F("results", Array(Struct(F("user", STRING), F("error_code", INT16), F("error_message", NULLABLE_STRING)))),
    flexible_from=0,
)
