"""The transaction coordinator (KIP-98) and the producer-id pool."""
