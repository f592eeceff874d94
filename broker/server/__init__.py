"""The broker process: network server, request handlers, purgatory, metadata cache, lifecycle."""
