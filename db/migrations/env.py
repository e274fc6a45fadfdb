"""Alembic environment of the rlsched store.

``rlsched db init`` / ``rlsched db upgrade`` (:mod:`db.session`) pass the engine to use in
``config.attributes["engine"]``; the developer's ``alembic -c db/migrations/alembic.ini``
takes the database from ``-x db=URL``, else ``$RLSCHED_DB``, else the default file.
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection, Engine

from db.models import Base
from db.session import make_engine

config = context.config
target_metadata = Base.metadata


def run_migrations_offline() -> None:
    """Emit the migration SQL for a URL without connecting (``alembic upgrade --sql``)."""
    url = context.get_x_argument(as_dictionary=True).get("db")
    engine = make_engine(url)
    context.configure(
        url=engine.url,
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        compare_server_default=True,
        # SQLite cannot ALTER most things: later revisions rebuild tables in batches.
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run the migrations on a live connection."""
    engine = config.attributes.get("engine")
    own = not isinstance(engine, Engine)
    if own:
        engine = make_engine(context.get_x_argument(as_dictionary=True).get("db"))
    assert isinstance(engine, Engine)
    try:
        with engine.connect() as connection:
            _run(connection)
            connection.commit()
    finally:
        if own:
            engine.dispose()


if config.config_file_name is not None:
    fileConfig(config.config_file_name)

if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
