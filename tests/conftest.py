"""Fixtures shared by every test directory: real ZooKeeper and broker processes (see tests/fixtures.py)."""

pytest_plugins = ["tests.fixtures"]
