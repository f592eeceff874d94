"""The paper's audit: per-window message counts published by each tier (`counts`), and their
reconciliation against what the clusters hold (`reconcile`)."""
