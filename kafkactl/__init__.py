"""kafkactl's command line: parses arguments, calls `broker`, renders the results."""

from broker import __version__

__all__ = ["__version__"]
