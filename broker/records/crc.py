"""CRC-32C (Castagnoli), the checksum of every RecordBatch v2.

One function, `crc32c`, serves the whole code base. It is backed by crcmod (a required dependency)
or, when the optional `fastcrc` extra is installed, by the `crc32c` package's hardware
implementation (SSE4.2 / ARMv8), which is some 30 times faster. `KAFKACTL_CRC_BACKEND=crcmod|crc32c`
forces one; the tests cross-check both. Test vector: crc32c(b"123456789") == 0xE3069283.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable

import crcmod.predefined

Buffer = bytes | bytearray | memoryview

_crcmod_crc32c: Callable[[Buffer], int] = crcmod.predefined.mkPredefinedCrcFun("crc-32c")


def _hardware_backend() -> Callable[[Buffer], int] | None:
    try:
        import crc32c as _hw
    except ImportError:
        return None
    return _hw.crc32c


def _select(name: str) -> tuple[str, Callable[[Buffer], int]]:
    if name in ("auto", "crc32c"):
        hw = _hardware_backend()
        if hw is not None:
            return "crc32c", hw
        if name == "crc32c":
            raise RuntimeError("KAFKACTL_CRC_BACKEND=crc32c but the crc32c package is not installed")
    return "crcmod", _crcmod_crc32c


BACKENDS: dict[str, Callable[[Buffer], int]] = {"crcmod": _crcmod_crc32c}
if (_hw := _hardware_backend()) is not None:
    BACKENDS["crc32c"] = _hw

#: The backend in use and `crc32c(data) -> int`, the CRC-32C of a bytes-like object.
BACKEND, crc32c = _select(os.environ.get("KAFKACTL_CRC_BACKEND", "auto"))


def crc32(data: Buffer) -> int:
    """CRC-32 (IEEE), the checksum of the legacy message formats (magic 0 and 1)."""
    return zlib.crc32(data) & 0xFFFFFFFF
