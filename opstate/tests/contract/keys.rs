//! The key directory (`KeyDirectory`): publish, look up, revoke, load.

use super::*;

#[tokio::test]
async fn key_directory_publish_lookup_revoke() {
    for (name, s) in backends().await {
        assert_eq!(s.keys.lookup("h1").await.unwrap(), None, "{name}");
        s.keys.publish("h1", &record(1)).await.unwrap();
        assert_eq!(
            s.keys.lookup("h1").await.unwrap(),
            Some(record(1)),
            "{name}"
        );
        let mut updated = record(1);
        updated.permissions.openai = false;
        s.keys.publish("h1", &updated).await.unwrap();
        assert_eq!(s.keys.lookup("h1").await.unwrap(), Some(updated), "{name}");
        s.keys.revoke("h1").await.unwrap();
        assert_eq!(s.keys.lookup("h1").await.unwrap(), None, "{name}");
        // Revoking twice is harmless.
        s.keys.revoke("h1").await.unwrap();
    }
}

#[tokio::test]
async fn key_directory_load_marks_loaded_after_entries() {
    for (name, s) in backends().await {
        assert!(
            !s.keys.is_loaded().await.unwrap(),
            "{name}: fresh store is not loaded"
        );
        let entries: Vec<(String, KeyRecord)> = (0..1200)
            .map(|i| (format!("hash-{i}"), record(i)))
            .collect();
        s.keys.load(&entries).await.unwrap();
        assert!(s.keys.is_loaded().await.unwrap(), "{name}");
        assert_eq!(
            s.keys.lookup("hash-0").await.unwrap(),
            Some(record(0)),
            "{name}"
        );
        assert_eq!(
            s.keys.lookup("hash-1199").await.unwrap(),
            Some(record(1199)),
            "{name}"
        );
    }
}

#[tokio::test]
async fn old_records_without_permissions_default_to_allowed() {
    let parsed: KeyRecord =
        serde_json::from_str(r#"{"key_id":1,"org_id":2,"group_id":3}"#).unwrap();
    assert_eq!(parsed.permissions, KeyPermissions::default());
}
