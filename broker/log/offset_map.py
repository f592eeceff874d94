"""The log cleaner's offset map: key hash → the last offset of that key in the dirty section of a log.

As Kafka's SkimpyOffsetMap it is bounded: `log.cleaner.dedupe.buffer.size` bytes (shared by the cleaner
threads) at `log.cleaner.io.buffer.load.factor` give it a fixed number of slots, and the cleaner stops
building it where it is full (it cleans up to that offset, and the rest in a later clean). Kafka's map
costs 24 bytes a key (an MD5 and an offset in one array); this one is a Python dict of 128-bit key digests
(16-byte bytes objects) to offsets, whose entries cost at most `ENTRY_BYTES` each (the dict's slot and
index, the digest and the offset objects), so the slots are counted at that cost: the memory the map takes
stays within the buffer it was given.

A key is hashed to 128 bits with BLAKE2b (`hashlib`, in C), as wide as Kafka's MD5: two keys of a log
sharing a digest (about n² / 2^129) is negligible; were it to happen, the older record of one of the two
keys would be dropped, as in Kafka. (A 64-bit hash, n² / 2^65, is not: about 1 in 40 for 10^9 keys.)

Beside it the map holds `unmapped`: the hashes of the keys of batches the clean copies whole and never maps
(transactional and legacy ones), noted as the rewrite passes them in offset order, so that a later tombstone
of such a key is never dropped (dropping it would bring the unmapped value back). It shares the map's slots;
when they run out `unmapped_overflow` is set and the rest of the clean keeps every tombstone.
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Iterable, Iterator
from functools import partial

#: bytes one entry of the map takes at most: its 16-byte digest (a 49-byte bytes object, 64 with the
#: allocator's rounding), its offset (an int, 32) and its share of the dict (30 bytes just before the dict
#: grows, 60 just after; 10^6 entries measured at 119 MB with tracemalloc)
ENTRY_BYTES = 160

_BLAKE2B_16 = partial(hashlib.blake2b, digest_size=16)
_DIGEST = operator.methodcaller("digest")


def key_hash(key: bytes) -> bytes:
    """The map's 128-bit digest of a record key."""
    return _BLAKE2B_16(key).digest()


def key_hashes(keys: Iterable[bytes]) -> Iterator[bytes]:
    """`key_hash` of each key, lazily (the per-record loops stay in C)."""
    return map(_DIGEST, map(_BLAKE2B_16, keys))


class OffsetMap:
    """A bounded map of key hash → offset; `put` refuses a new key once `slots` keys are in."""

    __slots__ = ("slots", "_map", "latest_offset", "unmapped", "unmapped_overflow")

    def __init__(self, memory_bytes: int, load_factor: float = 0.9) -> None:
        self.slots = max(1, int(memory_bytes * load_factor) // ENTRY_BYTES)
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1  # the largest offset put so far
        self.unmapped: set[bytes] = set()  # key hashes of batches copied whole (transactional, legacy)
        self.unmapped_overflow = False  # more of them than the slots left: every tombstone stays

    def __len__(self) -> int:
        return len(self._map)

    @property
    def full(self) -> bool:
        return len(self._map) + len(self.unmapped) >= self.slots

    @property
    def utilization(self) -> float:
        return len(self._map) / self.slots

    def room_for(self, new_keys: int) -> bool:
        """Whether `new_keys` more keys (at most: some may be in already) still fit."""
        return len(self._map) + len(self.unmapped) + new_keys <= self.slots

    def note_unmapped(self, hashes: list[bytes]) -> None:
        """Remember key hashes of a batch the clean copies whole; past the slots left, `unmapped_overflow`."""
        if self.unmapped_overflow:
            return
        self.unmapped.update(hashes)
        if len(self._map) + len(self.unmapped) > self.slots:
            self.unmapped.clear()
            self.unmapped_overflow = True

    def put(self, key: bytes, offset: int) -> bool:
        """Record `offset` as the last of `key`; False (nothing changed) when the key is new and the map full."""
        h = key_hash(key)
        m = self._map
        if h not in m and len(m) + len(self.unmapped) >= self.slots:
            return False
        m[h] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset
        return True

    def put_hashes(self, hashes: list[bytes], offsets: list[int]) -> None:
        """Put hashed keys (`key_hash`) in bulk; the caller checked `room_for(len(hashes))`."""
        self._map.update(zip(hashes, offsets, strict=True))
        if offsets and offsets[-1] > self.latest_offset:
            self.latest_offset = offsets[-1]

    def get(self, key: bytes) -> int:
        """The last offset recorded for `key`, or -1."""
        return self._map.get(key_hash(key), -1)

    def get_hash(self, h: bytes) -> int:
        return self._map.get(h, -1)

    @property
    def raw_get(self):
        """The map's `get(hash, default)` itself, for the cleaner's per-record loops (no Python frame a call)."""
        return self._map.get

    def clear(self) -> None:
        self._map.clear()
        self.latest_offset = -1
        self.unmapped.clear()
        self.unmapped_overflow = False
