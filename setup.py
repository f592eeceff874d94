"""Builds the optional C parts (the record codec, the Produce run codec); everything else is in pyproject.toml.

`optional=True`: without a compiler the install still succeeds and the pure-Python codec is used.
"""

from setuptools import Extension, setup

SHARED = "broker/records/_batch_bytes.h"  # big-endian helpers and the batch CRC, included by both

setup(
    ext_modules=[
        Extension("broker.records._codec", ["broker/records/_codec.c"], depends=[SHARED], optional=True),
        Extension("broker.protocol._produce_run", ["broker/protocol/_produce_run.c"], depends=[SHARED], optional=True),
    ]
)
