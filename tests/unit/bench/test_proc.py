"""broker.bench.proc: parsing /proc lines and the nearest-rank percentile (no broker)."""

import os

import pytest

from broker.bench import proc


def test_cpu_ticks_counts_fields_after_the_last_parenthesis():
    line = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 37 0 0 20 0 3 0 99 0 0\n"
    assert proc.cpu_ticks(line) == 250 + 37


def test_rss_kb_reads_vmrss_and_none_without_it():
    assert proc.rss_kb("Name:\tpython\nVmPeak:\t  900 kB\nVmRSS:\t  123456 kB\n") == 123456
    assert proc.rss_kb("Name:\tzombie\nState:\tZ (zombie)\n") is None


def test_own_process_is_readable_and_a_gone_one_is_none():
    assert proc.cpu_seconds(os.getpid()) >= 0
    assert proc.rss_mb(os.getpid()) > 1
    assert proc.cpu_seconds(2**22 + 1) is None  # above pid_max's ceiling: never a process
    assert proc.rss_mb(2**22 + 1) is None


def test_percentile_nearest_rank():
    assert proc.percentile([4, 1, 3, 2], 0.5) == 2
    assert proc.percentile([4, 1, 3, 2], 1.0) == 4
    assert proc.percentile([7], 0.99) == 7
    assert proc.percentile(list(range(1, 21)), 0.95) == 19
    assert proc.percentile([5, 1], 0.0) == 1
    with pytest.raises(ValueError):
        proc.percentile([], 0.5)
