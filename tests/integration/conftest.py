"""The behavioural store suite (tests/integration/test_store_*.py).

Its fixtures (``clock``, ``store_url``, ``store``, ``db``, ``table_rows``, ``snapshot``,
``rejected``) come from the shared plugin tests/store_fixtures.py; every store test takes
``database_url`` (tests/conftest.py), so it runs once on SQLite and once on PostgreSQL,
each time on a fresh database.
"""
