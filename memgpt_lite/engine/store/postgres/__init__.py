"""The Postgres backend: one database for agents on many machines (the `postgres` extra, which
brings psycopg; only this package imports it). See store.py."""
