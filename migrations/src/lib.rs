//! Schema migrations for PostgreSQL and SQLite (sea-orm-migration). Migrations never import
//! `entities`: they describe the schema as it was when written.
