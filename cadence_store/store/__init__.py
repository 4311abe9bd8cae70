"""The store layer: `RunStore`, its runner, the unit of work and their policies.

Each public call is described once (`calls`) and run by one `Runner` (the fast path or a
unit of work, busy retries, failover re-runs, the kept connection); `async_store` proxies it.
"""
