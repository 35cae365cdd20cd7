"""The row checks of docs/migration.md, run by tests/test_migration_table.py."""
