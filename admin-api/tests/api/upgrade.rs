//! Migration 000021 on a ledger that has data (issue 42): what it does to the accounts, the
//! sessions and the billing tokens that were there before it.

#[tokio::test]
async fn the_proof_of_address_migration_leaves_old_accounts_unproven_and_one_token_active() {
    use entities::status::{OrganizationStatus, TokenStatus};
    use migrations::{Migrator, MigratorTrait};
    use sea_orm::{ActiveModelTrait, ConnectionTrait, EntityTrait, Set, Statement};
    let db = admin_api::db::connect(&testkit::fresh_database_url().await)
        .await
        .unwrap();
    // The ledger as the last release left it (migrations up to 000020), with data.
    Migrator::up(&db, Some(20)).await.unwrap();
    let now = chrono::Utc::now();
    let org = entities::organizations::ActiveModel {
        name: Set("Old Co".into()),
        slug: Set("old-co".into()),
        status: Set(OrganizationStatus::Active),
        created_at: Set(now),
        owner_email: Set(Some("old@before.example".into())),
        billing_email: Set(None),
        activated_at: Set(Some(now)),
        ..Default::default()
    }
    .insert(&db)
    .await
    .unwrap();
    for (n, hash) in ["a", "b"].into_iter().enumerate() {
        entities::org_billing_tokens::ActiveModel {
            organization_id: Set(org.id),
            token_hash: Set(format!("hash-{hash}")),
            preview: Set(format!("tgb_{hash}")),
            status: Set(TokenStatus::Active),
            created_at: Set(now + chrono::Duration::seconds(i64::try_from(n).unwrap())),
            revoked_at: Set(None),
            ..Default::default()
        }
        .insert(&db)
        .await
        .unwrap();
    }
    let backend = db.get_database_backend();
    db.execute_raw(Statement::from_string(
        backend,
        "INSERT INTO console_users (email, password_hash, created_at, updated_at) VALUES \
         ('old@before.example', '$argon2id$x', '2026-11-01T00:00:00+00:00', '2026-11-01T00:00:00+00:00')",
    ))
    .await
    .unwrap();
    db.execute_raw(Statement::from_string(
        backend,
        "INSERT INTO console_sessions (id, user_id, csrf, ip, created_at, last_seen_at, expires_at) \
         SELECT 'session-hash', id, 'csrf', NULL, '2026-11-01T00:00:00+00:00', \
         '2026-11-01T00:00:00+00:00', '2099-01-01T00:00:00+00:00' FROM console_users",
    ))
    .await
    .unwrap();
    // The upgrade.
    Migrator::up(&db, None).await.unwrap();
    let users = entities::console_users::Entity::find()
        .all(&db)
        .await
        .unwrap();
    assert_eq!(users.len(), 1);
    assert_eq!(users[0].email_verified_at, None, "unproven until a code");
    assert_eq!(users[0].totp_enabled_at, None);
    assert!(
        entities::console_sessions::Entity::find()
            .all(&db)
            .await
            .unwrap()
            .is_empty(),
        "every session ended"
    );
    let tokens = entities::org_billing_tokens::Entity::find()
        .all(&db)
        .await
        .unwrap();
    let active: Vec<_> = tokens
        .iter()
        .filter(|t| t.status == TokenStatus::Active)
        .collect();
    assert_eq!(active.len(), 1);
    assert_eq!(active[0].token_hash, "hash-b", "the newest stays active");
    assert!(
        tokens
            .iter()
            .any(|t| t.token_hash == "hash-a" && t.status == TokenStatus::Rotated)
    );
}
