"""Mirroring between clusters (`kafkactl mirror`): topics picked and made on the target (`topics`), batches
restamped with where they came from (`stamp`), the engine that copies them exactly once (`engine`), and
how far each partition is (`status`)."""
