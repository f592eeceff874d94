"""The fixtures live in tests/fixtures.py (shared with tests/compat); this re-exports its plain helpers."""

from tests.fixtures import zk_client  # noqa: F401
