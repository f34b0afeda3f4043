//! Routes the gateway answers itself, without a supplier.

use crate::route::models::Router;
use bytes::Bytes;
use serde_json::json;

/// `GET /compat/v1/models`: the model ids the key's group exposes, nothing else.
pub fn models_list(router: &Router, group_id: i64) -> Bytes {
    let data: Vec<_> = router
        .group_models(group_id)
        .iter()
        .map(|id| json!({"id": id, "object": "model"}))
        .collect();
    Bytes::from(json!({"object": "list", "data": data}).to_string())
}
