"""Kafka's protocol error codes (the subset kafkactl answers or understands), with retriability."""

from __future__ import annotations

from enum import IntEnum

from broker.errors import KafkactlError


class ErrorCode(IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    UNSUPPORTED_COMPRESSION_TYPE = 76
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    TOPIC_DELETION_DISABLED = 73
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    UNKNOWN_TOPIC_ID = 100
    TRANSACTIONAL_ID_NOT_FOUND = 105

    @property
    def retriable(self) -> bool:
        return self in _RETRIABLE


_RETRIABLE = frozenset({
    ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
    ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.OFFSET_NOT_AVAILABLE,
    ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.CONCURRENT_TRANSACTIONS,
    ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH,
    ErrorCode.UNSTABLE_OFFSET_COMMIT,
})  # fmt: skip


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"ERROR_{code}"


class KafkaError(KafkactlError):
    """A failure that carries a Kafka error code, as aiokafka's and kazoo's errors do: `code`, its `name`
    and whether the same request may succeed if retried (`retriable`).

    A subclass per code comes from `error_class`; the clients' own errors (ConsumeError, ProduceError,
    AdminError, ...) are KafkaErrors too, with the code passed in when one is known (-1 when none is)."""

    code: int = ErrorCode.UNKNOWN_SERVER_ERROR
    name: str = ErrorCode.UNKNOWN_SERVER_ERROR.name
    retriable: bool = False

    def __init__(self, message: str | None = None, code: int | None = None) -> None:
        if code is not None:
            self.code = int(code)
            self.name = error_name(code)
            self.retriable = is_retriable(code)
        super().__init__(self.name if message is None else message)

    def __reduce__(self):  # type: ignore[no-untyped-def]
        # a code's class is built at run time, not a module attribute: pickle rebuilds it from the code
        if _CLASSES.get(self.code) is type(self):
            return (kafka_error, (self.code, str(self)), self.__dict__)
        return super().__reduce__()


def is_retriable(code: int) -> bool:
    """Whether a request answered with `code` may succeed if sent again (an unknown code is not)."""
    return code in _RETRIABLE


def class_name(code: int) -> str:
    """The Python name of a code's error class: NOT_LEADER_OR_FOLLOWER → NotLeaderOrFollowerError,
    NETWORK_EXCEPTION → NetworkError; an unknown code → KafkaError123."""
    if code not in ErrorCode._value2member_map_:
        return f"KafkaError{code}".replace("-", "_")
    words = ErrorCode(code).name.split("_")
    if words[-1] in ("ERROR", "EXCEPTION"):
        words = words[:-1]
    return "".join(w.capitalize() for w in words) + "Error"


_CLASSES: dict[int, type[KafkaError]] = {}


def error_class(code: int) -> type[KafkaError]:
    """The KafkaError subclass of one code (built on first use, then the same class every time), whose
    `code`, `name` and `retriable` are class attributes: `except error_class(ErrorCode.NOT_COORDINATOR)`."""
    code = int(code)
    cls = _CLASSES.get(code)
    if cls is None:
        doc = f"Kafka's {error_name(code)} (error code {code})."
        attrs = {"code": code, "name": error_name(code), "retriable": is_retriable(code), "__doc__": doc,
                 "__module__": __name__}  # fmt: skip
        cls = _CLASSES[code] = type(class_name(code), (KafkaError,), attrs)
    return cls


def kafka_error(code: int, message: str | None = None) -> KafkaError:
    """An instance of the code's class (`message` defaults to the code's name)."""
    return error_class(code)(message, code)
