"""A tiny host application: each order is a host row written in the same transaction as
a transition of the customer's journal run."""

from __future__ import annotations

from sqlalchemy import String, create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from cadence_store import RunProjection, RunStore


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    run_id: Mapped[str] = mapped_column(String(36))
    item: Mapped[str] = mapped_column(String(80))


def create_tables(url: str) -> None:
    engine = create_engine(url)
    try:
        Base.metadata.create_all(engine)
    finally:
        engine.dispose()


def open_account(store: RunStore, customer: str) -> str:
    run = store.start_run("abel-implement", change=customer, operation_id=f"open-{customer}")
    return run.run_id


def place_order(store: RunStore, run_id: str, order_id: int, item: str) -> RunProjection:
    def add_order(session: Session) -> None:
        session.add(Order(id=order_id, run_id=run_id, item=item))

    return store.transition_atomically(
        run_id,
        "paused",
        operation_id=f"order-{order_id}-{item}",
        code="order-placed",
        write=add_order,
    )
