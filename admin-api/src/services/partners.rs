//! Partners as the console reads them (the partner API's identity is `funding::me`).

use entities::partners;
use sea_orm::{ConnectionTrait, DbErr, EntityTrait};

/// The partner `id`, if there is one.
pub async fn find(db: &impl ConnectionTrait, id: i64) -> Result<Option<partners::Model>, DbErr> {
    partners::Entity::find_by_id(id).one(db).await
}
