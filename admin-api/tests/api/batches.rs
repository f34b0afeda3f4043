//! Batch retention (issue 46): the sweep removes batches that ended more than `[batches]
//! retention_days` ago (their lines and result files) and files past their expiry, and keeps
//! everything else.

use super::*;
use entities::{batch_files, batch_lines, batches};
use sea_orm::{ActiveModelTrait, EntityTrait, Set};

fn file(
    public: &str,
    purpose: &str,
    batch: Option<i64>,
    expires: chrono::DateTime<chrono::Utc>,
) -> batch_files::ActiveModel {
    batch_files::ActiveModel {
        public_id: Set(public.into()),
        organization_id: Set(1),
        purpose: Set(purpose.into()),
        filename: Set(format!("{public}.jsonl")),
        bytes: Set(2),
        lines: Set(1),
        content: Set(Some(b"{}".to_vec())),
        batch_id: Set(batch),
        created_at: Set(expires - chrono::Duration::days(30)),
        expires_at: Set(expires),
        ..Default::default()
    }
}

fn batch(
    public: &str,
    status: &str,
    updated: chrono::DateTime<chrono::Utc>,
) -> batches::ActiveModel {
    batches::ActiveModel {
        public_id: Set(public.into()),
        organization_id: Set(1),
        api_key_id: Set(1),
        endpoint: Set("/v1/chat/completions".into()),
        completion_window: Set("24h".into()),
        metadata: Set(None),
        input_file_id: Set(0),
        output_file_id: Set(None),
        error_file_id: Set(None),
        status: Set(status.into()),
        total: Set(1),
        completed: Set(1),
        failed: Set(0),
        errors: Set(None),
        created_at: Set(updated),
        expires_at: Set(updated + chrono::Duration::hours(24)),
        updated_at: Set(updated),
        ..Default::default()
    }
}

#[tokio::test]
async fn the_retention_sweep_removes_old_batches_and_expired_files_only() {
    let api = Api::start().await;
    let db = &api.state.db;
    let now = chrono::Utc::now();
    let long_ago = now - chrono::Duration::days(31);
    let old = batch("batch_old", "completed", long_ago)
        .insert(db)
        .await
        .unwrap();
    let recent = batch("batch_recent", "completed", now - chrono::Duration::days(2))
        .insert(db)
        .await
        .unwrap();
    // Running for 31 days is not possible (24 h window), but an unended batch is never swept.
    let open = batch("batch_open", "in_progress", long_ago)
        .insert(db)
        .await
        .unwrap();
    for b in [&old, &recent, &open] {
        batch_lines::ActiveModel {
            batch_id: Set(b.id),
            line: Set(0),
            custom_id: Set("a".into()),
            body: Set("{}".into()),
            status: Set("succeeded".into()),
            request_id: Set(None),
            answer_status: Set(None),
            answer: Set(None),
            error_code: Set(None),
            error_message: Set(None),
            attempts: Set(1),
            updated_at: Set(now),
        }
        .insert(db)
        .await
        .unwrap();
    }
    file(
        "file-old-output",
        "batch_output",
        Some(old.id),
        now + chrono::Duration::days(1),
    )
    .insert(db)
    .await
    .unwrap();
    file(
        "file-recent-output",
        "batch_output",
        Some(recent.id),
        now + chrono::Duration::days(28),
    )
    .insert(db)
    .await
    .unwrap();
    file(
        "file-expired",
        "batch",
        None,
        now - chrono::Duration::seconds(1),
    )
    .insert(db)
    .await
    .unwrap();
    file(
        "file-fresh",
        "batch",
        None,
        now + chrono::Duration::days(29),
    )
    .insert(db)
    .await
    .unwrap();

    admin_api::workers::batch_runner::sweep(&api.state)
        .await
        .unwrap();

    let mut left: Vec<String> = batches::Entity::find()
        .all(db)
        .await
        .unwrap()
        .into_iter()
        .map(|b| b.public_id)
        .collect();
    left.sort();
    assert_eq!(left, ["batch_open", "batch_recent"]);
    let mut lines: Vec<i64> = batch_lines::Entity::find()
        .all(db)
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.batch_id)
        .collect();
    lines.sort_unstable();
    let mut want = vec![recent.id, open.id];
    want.sort_unstable();
    assert_eq!(lines, want, "the old batch's lines went with it");
    let mut files: Vec<String> = batch_files::Entity::find()
        .all(db)
        .await
        .unwrap()
        .into_iter()
        .map(|f| f.public_id)
        .collect();
    files.sort();
    assert_eq!(files, ["file-fresh", "file-recent-output"]);
}
