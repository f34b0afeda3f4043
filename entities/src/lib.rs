//! sea-orm entity models of the ledger of record (PostgreSQL or SQLite). Models only, no logic:
//! rules live in admin-api's services, which map these to their own DTOs.

pub mod customer_api_keys;
pub mod organizations;
