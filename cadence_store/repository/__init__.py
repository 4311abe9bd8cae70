"""The repository layer: `RunRepository` over one `JournalTransaction`.

The journal's rules (`cadence_store.journal`) applied to stored rows inside one
transaction: the append, leases and reads. It runs no transaction of its own; the store
layer (or a host's `Session`) owns it.
"""
