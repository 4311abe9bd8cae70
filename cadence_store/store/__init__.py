"""The store layer: `RunStore`, its transactions, the unit of work and their policies.

`RunStore`'s calls run through `Transactions` (the fast path or a unit of work, the kept
connection) and the one retry loop (`retries`: busy retries, failover re-runs);
`async_store` proxies it.
"""
