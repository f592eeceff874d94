"""The coordinators: consumer groups (`group/`) and transactions (`txn/`), each reached through a narrow
interface of its own rather than the whole broker."""
