"""Self-test of the test plumbing: both engines are real and reachable."""

from __future__ import annotations

from sqlalchemy import create_engine, text


def test_engine_is_real(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT 1")).scalar_one() == 1

        if engine.dialect.name == "postgresql":
            with engine.connect() as conn:
                version = conn.execute(text("SHOW server_version_num")).scalar_one()
            assert int(version) >= 150000, f"need PostgreSQL >= 15, got {version}"

        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE probe (id INTEGER PRIMARY KEY, note TEXT)"))

        # A row written and committed on one connection is visible on another;
        # before the commit it is not (two independent sessions on one server).
        with engine.connect() as writer, engine.connect() as reader:
            if engine.dialect.name == "postgresql":
                pids = {
                    c.execute(text("SELECT pg_backend_pid()")).scalar_one()
                    for c in (writer, reader)
                }
                assert len(pids) == 2, "expected two distinct server backends"
                reader.commit()
                writer.commit()
            writer.execute(text("INSERT INTO probe (id, note) VALUES (1, 'hello')"))
            assert reader.execute(text("SELECT count(*) FROM probe")).scalar_one() == 0
            reader.rollback()
            writer.commit()
            note = reader.execute(text("SELECT note FROM probe WHERE id = 1")).scalar_one()
            assert note == "hello"
    finally:
        engine.dispose()
