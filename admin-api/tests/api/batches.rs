//! Batch retention (issue 46): the sweep removes batches that ended more than `[batches]
//! retention_days` ago (their lines and result files) and files past their expiry, and keeps
//! everything else.

use super::*;
use entities::{batch_files, batch_lines, batches, usage_records};
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
            ..Default::default()
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

fn record(
    org: i64,
    request: &str,
    batch: &str,
    line: i32,
    charged: i64,
) -> usage_records::ActiveModel {
    let at = chrono::Utc::now();
    usage_records::ActiveModel {
        request_id: Set(request.into()),
        organization_id: Set(org),
        api_key_id: Set(1),
        group_id: Set(1),
        route: Set("chat_completions".into()),
        model_requested: Set("gpt-4o-mini".into()),
        model_served: Set("gpt-4o-mini".into()),
        account_id: Set("a".into()),
        input_tokens: Set(10),
        output_tokens: Set(5),
        cached_tokens: Set(0),
        cache_write_tokens: Set(0),
        measurement: Set("exact".into()),
        status: Set(200),
        stream: Set(false),
        cost_nanos: Set(charged),
        charged_nanos: Set(charged),
        wholesale_nanos: Set(0),
        excess_nanos: Set(0),
        started_at: Set(at),
        settled_at: Set(at),
        project: Set(None),
        workflow: Set(None),
        audio_seconds: Set(0),
        images: Set(0),
        video_seconds: Set(0),
        mirror_confirmed: Set(true),
        batch_id: Set(Some(batch.into())),
        batch_line: Set(Some(line)),
        ..Default::default()
    }
}

/// The console's Batches page: an organization's batches of both surfaces newest first, twenty
/// to a page, each with its lines by state and its spend from the ledger; a bad page link is a
/// 400; another organization's batches never show, and its page is a 404 to a stranger.
#[tokio::test]
async fn the_batches_page_lists_an_organizations_batches_with_their_spend() {
    use super::console::activate;
    let api = Api::start().await;
    let db = &api.state.db;
    let (mut owner, org, _) = activate(&api, "batches-a").await;
    let (mut stranger, other_org, _) = activate(&api, "batches-b").await;
    let t0 = chrono::Utc::now() - chrono::Duration::hours(2);
    let mut made = Vec::new();
    for i in 0..25i64 {
        let mut b = batch(&format!("batch_page{i:02}"), "completed", t0);
        b.organization_id = Set(org);
        b.created_at = Set(t0 + chrono::Duration::minutes(i));
        if i == 23 {
            b.endpoint = Set("/v1/messages".into());
            b.public_id = Set(format!("msgbatch_page{i:02}"));
        }
        made.push(b.insert(db).await.unwrap());
    }
    let mut theirs = batch("batch_theirs", "in_progress", t0);
    theirs.organization_id = Set(other_org);
    theirs.insert(db).await.unwrap();
    let newest = made.last().unwrap();
    for (line, status) in [(0, "succeeded"), (1, "succeeded"), (2, "failed")] {
        batch_lines::ActiveModel {
            batch_id: Set(newest.id),
            line: Set(line),
            custom_id: Set(format!("c{line}")),
            body: Set("{}".into()),
            status: Set(status.into()),
            request_id: Set(None),
            answer_status: Set(None),
            answer: Set(None),
            error_code: Set(None),
            error_message: Set(None),
            attempts: Set(1),
            updated_at: Set(t0),
            ..Default::default()
        }
        .insert(db)
        .await
        .unwrap();
    }
    record(org, "r-0", &newest.public_id, 0, 1_000)
        .insert(db)
        .await
        .unwrap();
    record(org, "r-1", &newest.public_id, 1, 2_345)
        .insert(db)
        .await
        .unwrap();
    record(other_org, "r-x", "batch_theirs", 0, 9_999)
        .insert(db)
        .await
        .unwrap();

    let path = format!("/console/orgs/{org}/batches");
    let first = owner.get(&path).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let ids = |body: &str| -> Vec<String> {
        body.split("<code class=\"id\">")
            .skip(1)
            .map(|s| s[..s.find('<').unwrap()].to_string())
            .collect()
    };
    let expected: Vec<String> = made.iter().rev().map(|b| b.public_id.clone()).collect();
    assert_eq!(ids(&first.body), expected[..20], "newest first, twenty");
    assert!(first.body.contains("aria-current=\"page\">Batches</a>"));
    assert!(
        first.body.contains(
            "<br><span class=\"help\">2 succeeded</span><br><span class=\"help\">1 failed</span>"
        ),
        "{}",
        first.body
    );
    assert!(
        first.body.contains("data value=\"0.000003345\""),
        "the batch's spend: {}",
        first.body
    );
    assert!(first.body.contains("Anthropic message batch"));
    assert!(first.body.contains("OpenAI batch · chat completions"));
    assert!(!first.body.contains("batch_theirs"));
    let at = first.body.find("\" rel=\"next\">Older batches").unwrap();
    let start = first.body[..at].rfind("href=\"").unwrap() + 6;
    let older = owner.get(&first.body[start..at]).await;
    assert_eq!(older.status, 200, "{}", older.body);
    assert_eq!(ids(&older.body), expected[20..]);
    assert!(!older.body.contains("rel=\"next\""));
    assert!(older.body.contains(">Newest batches</a>"));

    let bad = owner.get(&format!("{path}?after=batch_theirs")).await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("That page link is not valid"));
    assert_eq!(stranger.get(&path).await.status, 404);
    let own = stranger
        .get(&format!("/console/orgs/{other_org}/batches"))
        .await;
    assert_eq!(own.status, 200);
    assert_eq!(ids(&own.body), ["batch_theirs"]);
    assert!(
        own.body.contains("data value=\"0.000009999\""),
        "{}",
        own.body
    );
}
