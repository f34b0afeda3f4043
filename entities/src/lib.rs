//! sea-orm entity models of the ledger of record (PostgreSQL or SQLite). Models only, no logic:
//! rules live in admin-api's services. Tables arrive with the migrations that create them.
