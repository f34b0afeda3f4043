//! The Requests pages (issue 45) over HTTP: an organization's settled calls newest first, its
//! filters (key, model, outcome, day), keyset pages that neither repeat nor skip a call (ties on
//! the start included), a rare match far back found through the hourly buckets, bad filters
//! refused by field, amounts rounded with the exact figure beside them, and the same calls in
//! the partner's dashboard per customer; other organizations' and partners' calls never show.

use super::console::{Browser, activate, joined};
use super::*;

/// One call of `key` in `org` settled through the usage stream: `at_ms` its start, `status`,
/// `cost` nano-USD charged, `latency` ms.
#[allow(clippy::too_many_arguments)]
async fn call(
    api: &Api,
    id: &str,
    org: i64,
    key: i64,
    model: &str,
    at_ms: i64,
    status: u16,
    cost: i64,
) {
    let event = opstate::UsageEvent {
        request_id: id.into(),
        key_id: key,
        org_id: org,
        group_id: 1,
        route: "chat_completions".into(),
        model_requested: model.into(),
        model_served: model.into(),
        account_id: "a".into(),
        input_tokens: 100,
        output_tokens: if status < 400 { 10 } else { 0 },
        cached_tokens: 0,
        cache_write_tokens: 0,
        cache_write_1h_tokens: 0,
        measurement: opstate::Measurement::Exact,
        status,
        stream: false,
        started_at_ms: u64::try_from(at_ms).unwrap(),
        latency_ms: 1_234,
        ttfb_ms: None,
        attempts: 1,
        cost_nanos: nano(cost),
        charged_nanos: nano(cost),
        excess_nanos: nano(0),
        hold_nanos: nano(cost),
        project: None,
        workflow: None,
        audio_seconds: 0,
        images: 0,
        video_seconds: 0,
        retail_rate: None,
        wholesale_rate: None,
        resent: false,
        supplier: Default::default(),
        batch: None,
    };
    api.state.stores.usage.append(&event).await.unwrap();
}

/// The request ids a page lists, in its order.
fn ids(body: &str) -> Vec<String> {
    body.split("<code class=\"id\">")
        .skip(1)
        .map(|s| s[..s.find('<').unwrap()].to_string())
        .collect()
}

/// The link of the page's "Older calls" (unescaped), if any.
fn older(body: &str) -> Option<String> {
    let at = body.find("\" rel=\"next\">Older calls")?;
    let start = body[..at].rfind("href=\"")? + 6;
    Some(body[start..at].replace("&amp;", "&").replace("&#38;", "&"))
}

/// Every call the pages of `path` list, following "Older calls" (at most `pages` pages).
async fn every_page(b: &mut Browser, path: &str, pages: usize) -> (Vec<String>, usize) {
    let mut all = Vec::new();
    let mut next = Some(path.to_string());
    let mut n = 0;
    while let Some(p) = next {
        let page = b.get(&p).await;
        assert_eq!(page.status, 200, "{p}: {}", page.body);
        all.extend(ids(&page.body));
        next = older(&page.body);
        n += 1;
        assert!(n <= pages, "more than {pages} pages");
    }
    (all, n)
}

#[tokio::test]
async fn the_requests_page_lists_calls_newest_first_filtered_and_by_keyset() {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
    let api = Api::start().await;
    let (mut owner, org, _) = activate(&api, "req-a").await;
    let (mut stranger, other_org, _) = activate(&api, "req-b").await;
    let keys_path = format!("/console/orgs/{org}/keys");
    let csrf = owner.get(&keys_path).await.csrf();
    let mut secrets = Vec::new();
    for name in ["web", "batch"] {
        let created = owner
            .post(
                &keys_path,
                &[("csrf", &csrf), ("name", name), ("group_id", "1")],
                None,
            )
            .await;
        assert_eq!(created.status, 200, "{}", created.body);
        let at = created.body.find("tgk_").unwrap();
        let rest = &created.body[at..];
        secrets.push(rest[..rest.find('<').unwrap()].to_string());
    }
    let keys = entities::customer_api_keys::Entity::find()
        .filter(entities::customer_api_keys::Column::OrganizationId.eq(org))
        .order_by_asc(entities::customer_api_keys::Column::Id)
        .all(&api.state.db)
        .await
        .unwrap();
    let (web, batch) = (keys[0].id, keys[1].id);

    // 2026-03-04 10:00 UTC and on: 23 calls a minute apart (two pairs sharing their millisecond),
    // web and batch, two models; one failed call five days earlier, behind them all; another
    // organization's call in between.
    let t0 = chrono::DateTime::parse_from_rfc3339("2026-03-04T10:00:00Z")
        .unwrap()
        .timestamp_millis();
    let mut expected = Vec::new();
    for i in 0..23i64 {
        let at = t0 + 60_000 * if i == 5 || i == 15 { i - 1 } else { i };
        let (key, model) = match i % 3 {
            0 => (web, "gpt-4o"),
            1 => (web, "gpt-4o-mini"),
            _ => (batch, "gpt-4o-mini"),
        };
        let id = format!("req-{i:02}");
        call(&api, &id, org, key, model, at, 200, 1_000 + i).await;
        expected.push((at, id, key, model));
    }
    let early = t0 - 5 * 86_400_000;
    call(&api, "req-failed", org, batch, "gpt-4o", early, 502, 0).await;
    call(
        &api,
        "req-cheap",
        org,
        web,
        "gpt-4o",
        early - 1,
        200,
        123_456,
    )
    .await;
    call(&api, "req-other", other_org, 999, "gpt-4o", t0 + 1, 200, 7).await;
    admin_api::workers::settler::drain_once(&api.state, "t")
        .await
        .unwrap();
    // Newest first; ties on the start by the record's id, newest first.
    let rows = entities::usage_records::Entity::find()
        .filter(entities::usage_records::Column::OrganizationId.eq(org))
        .order_by_desc(entities::usage_records::Column::StartedAt)
        .order_by_desc(entities::usage_records::Column::Id)
        .all(&api.state.db)
        .await
        .unwrap();
    let newest_first: Vec<String> = rows.iter().map(|r| r.request_id.clone()).collect();
    assert_eq!(newest_first.len(), 25);
    assert_eq!(rows[0].latency_ms, Some(1_234), "the latency is kept");

    // A batch line's call (issue 46) says so, with its batch and line.
    {
        use sea_orm::{ActiveModelTrait, Set};
        let mut r: entities::usage_records::ActiveModel = rows
            .iter()
            .find(|r| r.request_id == "req-02")
            .unwrap()
            .clone()
            .into();
        r.batch_id = Set(Some("batch_nightly".into()));
        r.batch_line = Set(Some(7));
        r.update(&api.state.db).await.unwrap();
    }
    let path = format!("/console/orgs/{org}/requests");
    let first = owner.get(&path).await;
    assert!(
        first.body.contains(
            "<span class=\"tag\">batch</span> <span class=\"help\"><code>batch_nightly</code> line 7</span>"
        ),
        "a batch line's call shows its batch"
    );
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(
        ids(&first.body),
        newest_first,
        "every call on one page of 50"
    );
    assert!(
        !first.body.contains("req-other"),
        "another organization's call"
    );
    for secret in &secrets {
        assert!(!first.body.contains(secret.as_str()), "no key secret");
    }
    assert!(first.body.contains("1234 ms"), "latency shown");
    assert!(
        first
            .body
            .contains("<data value=\"0.000123456\" title=\"0.000123456 USD\">0.0001235</data>"),
        "an amount rounded for reading beside its exact figure"
    );
    assert!(first.body.contains("<span class=\"tag failed\">502</span>"));
    assert!(older(&first.body).is_none(), "one page");

    // Pages of ten: newest first, each call once, three pages.
    let (paged, n) = every_page(&mut owner, &format!("{path}?size=10"), 3).await;
    assert_eq!((paged, n), (newest_first.clone(), 3));
    // Filters, each on its own and together, across pages.
    let only = |pick: &dyn Fn(&entities::usage_records::Model) -> bool| -> Vec<String> {
        rows.iter()
            .filter(|r| pick(r))
            .map(|r| r.request_id.clone())
            .collect()
    };
    for (q, want) in [
        (format!("key={web}"), only(&|r| r.api_key_id == web)),
        (
            "model=gpt-4o".to_string(),
            only(&|r| r.model_served == "gpt-4o"),
        ),
        ("status=failed".into(), vec!["req-failed".to_string()]),
        ("status=succeeded".into(), only(&|r| r.status < 400)),
        (
            "day=2026-02-27".into(),
            vec!["req-failed".into(), "req-cheap".into()],
        ),
        ("day=2026-03-05".into(), vec![]),
        (
            format!("key={batch}&model=gpt-4o-mini&day=2026-03-04"),
            only(&|r| r.api_key_id == batch && r.model_served == "gpt-4o-mini"),
        ),
        ("model=no-such-model".into(), vec![]),
    ] {
        let (got, _) = every_page(&mut owner, &format!("{path}?size=10&{q}"), 3).await;
        assert_eq!(got, want, "{q}");
    }
    // The failed call five days back is the only match of its filter: found at once.
    let failed = owner.get(&format!("{path}?status=failed")).await;
    assert_eq!(ids(&failed.body), ["req-failed"]);

    // Bad filters: 400 naming the field (marked invalid), no calls shown.
    let unknown_key = format!("key={}", web + batch + 1_000);
    for (q, field) in [
        ("key=x", Some("requests-key")),
        (unknown_key.as_str(), Some("requests-key")),
        ("status=ok", Some("requests-status")),
        ("day=2026-02-30", Some("requests-day")),
        ("size=7", Some("requests-size")),
        ("before=garbage", None),
    ] {
        let page = owner.get(&format!("{path}?{q}")).await;
        assert_eq!(page.status, 400, "{q}");
        assert!(
            page.body.contains("role=\"alert\" id=\"requests-error\""),
            "{q}"
        );
        if let Some(field) = field {
            let at = page.body.find(&format!("id=\"{field}\"")).unwrap();
            let tag = &page.body[at..at + page.body[at..].find('>').unwrap()];
            assert!(tag.contains("aria-invalid=\"true\""), "{q}: {tag}");
        }
        assert!(ids(&page.body).is_empty(), "{q}: nothing listed");
    }
    // Another organization's page: 404 to the stranger, who sees only its own call.
    assert_eq!(stranger.get(&path).await.status, 404);
    let theirs = stranger
        .get(&format!("/console/orgs/{other_org}/requests"))
        .await;
    assert_eq!(ids(&theirs.body), ["req-other"]);

    // The partner's dashboard: the same calls per customer, with their wholesale cost; another
    // partner's team gets a 404.
    let customer = entities::customers::Entity::find()
        .filter(entities::customers::Column::OrganizationId.eq(org))
        .one(&api.state.db)
        .await
        .unwrap()
        .unwrap();
    let mut pat = joined(
        &api,
        None,
        Some(customer.partner_id),
        "pat@req.example",
        "viewer",
    )
    .await;
    let dash = format!(
        "/console/partners/{}/customers/{}/requests",
        customer.partner_id, customer.id
    );
    let (seen, _) = every_page(&mut pat, &format!("{dash}?size=10"), 3).await;
    assert_eq!(seen, newest_first);
    let page = pat.get(&dash).await;
    assert!(page.body.contains("Wholesale (USD)"), "{}", page.body);
    let customer_page = pat
        .get(&format!(
            "/console/partners/{}/customers/{}",
            customer.partner_id, customer.id
        ))
        .await;
    assert!(customer_page.body.contains(&format!("href=\"{dash}\"")));
    let rival = api.owner("1").await;
    let mut eve = joined(&api, None, Some(rival.id), "eve@req.example", "owner").await;
    assert_eq!(eve.get(&dash).await.status, 404);
    let rival_path = format!(
        "/console/partners/{}/customers/{}/requests",
        rival.id, customer.id
    );
    assert_eq!(eve.get(&rival_path).await.status, 404, "not its customer");
}

/// Migration 000023 on a ledger that has calls: each hourly bucket learns its failed calls, so the
/// request log's "failed" filter finds the calls settled before it.
#[tokio::test]
async fn the_request_log_migration_counts_the_failed_calls_already_settled() {
    use migrations::{Migrator, MigratorTrait};
    use sea_orm::{ActiveValue::Set, ConnectionTrait, EntityTrait, Statement};
    let db = admin_api::db::connect(&testkit::fresh_database_url().await)
        .await
        .unwrap();
    Migrator::up(&db, Some(22)).await.unwrap();
    let hour = chrono::DateTime::parse_from_rfc3339("2026-03-04T10:00:00Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    for (n, (minute, status, model)) in [
        (5, 502, "gpt-4o"),
        (50, 429, "gpt-4o"),
        (20, 200, "gpt-4o"),
        (10, 500, "gpt-4o-mini"),
        (70, 500, "gpt-4o"),
    ]
    .into_iter()
    .enumerate()
    {
        let at = hour + chrono::Duration::minutes(minute);
        entities::usage_records::Entity::insert(entities::usage_records::ActiveModel {
            request_id: Set(format!("old-{n}")),
            organization_id: Set(1),
            api_key_id: Set(1),
            group_id: Set(1),
            route: Set("chat_completions".into()),
            model_requested: Set(model.into()),
            model_served: Set(model.into()),
            account_id: Set("a".into()),
            input_tokens: Set(1),
            output_tokens: Set(0),
            cached_tokens: Set(0),
            cache_write_tokens: Set(0),
            measurement: Set("exact".into()),
            status: Set(status),
            stream: Set(false),
            cost_nanos: Set(0),
            charged_nanos: Set(0),
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
            ..Default::default()
        })
        .exec_without_returning(&db)
        .await
        .unwrap();
    }
    for (model, start) in [
        ("gpt-4o", hour),
        ("gpt-4o-mini", hour),
        ("gpt-4o", hour + chrono::Duration::hours(1)),
        ("gpt-4o", hour + chrono::Duration::hours(2)),
    ] {
        entities::usage_hourly::Entity::insert(entities::usage_hourly::ActiveModel {
            organization_id: Set(1),
            api_key_id: Set(1),
            model: Set(model.into()),
            hour_start: Set(start),
            requests: Set(1),
            input_tokens: Set(0),
            output_tokens: Set(0),
            cached_tokens: Set(0),
            cache_write_tokens: Set(0),
            estimated_requests: Set(0),
            cost_nanos: Set(0),
            charged_nanos: Set(0),
            wholesale_nanos: Set(0),
            images: Set(0),
            video_seconds: Set(0),
            ..Default::default()
        })
        .exec_without_returning(&db)
        .await
        .unwrap();
    }
    Migrator::up(&db, None).await.unwrap();
    let backend = db.get_database_backend();
    let rows = db
        .query_all_raw(Statement::from_string(
            backend,
            "SELECT model, failed_requests FROM usage_hourly ORDER BY hour_start, model",
        ))
        .await
        .unwrap();
    let got: Vec<(String, i64)> = rows
        .iter()
        .map(|r| {
            (
                r.try_get::<String>("", "model").unwrap(),
                r.try_get::<i64>("", "failed_requests").unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("gpt-4o".to_string(), 2),
            ("gpt-4o-mini".to_string(), 1),
            ("gpt-4o".to_string(), 1),
            ("gpt-4o".to_string(), 0),
        ]
    );
    let latency = db
        .query_one_raw(Statement::from_string(
            backend,
            "SELECT count(*) AS n FROM usage_records WHERE latency_ms IS NULL",
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        latency.try_get::<i64>("", "n").unwrap(),
        5,
        "old records: no latency"
    );
}

/// `scripts/bench-console --requests`: the Requests page on a ledger of ten million records
/// (`BENCH_RECORDS`), half of them one organization's over 30 days (three keys, three models,
/// one call in a hundred failed, a rare key with ten calls), the rest nine other organizations';
/// each page through the console's HTTP route, the median and the slowest of seven.
#[tokio::test]
#[ignore = "a benchmark: scripts/bench-console --requests"]
async fn bench_the_requests_page_on_ten_million_records() {
    use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder};
    use std::time::Instant;
    assert!(
        std::env::var("DATABASE_URL").is_ok_and(|u| u.starts_with("postgres")),
        "the benchmark runs on PostgreSQL (DATABASE_URL)"
    );
    let records: i64 = std::env::var("BENCH_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let api = Api::start().await;
    let (mut owner, org, _) = activate(&api, "bench-req").await;
    let keys_path = format!("/console/orgs/{org}/keys");
    let csrf = owner.get(&keys_path).await.csrf();
    for name in ["web", "batch", "jobs", "rare"] {
        let created = owner
            .post(
                &keys_path,
                &[("csrf", &csrf), ("name", name), ("group_id", "1")],
                None,
            )
            .await;
        assert_eq!(created.status, 200, "{}", created.body);
    }
    let keys: Vec<i64> = entities::customer_api_keys::Entity::find()
        .filter(entities::customer_api_keys::Column::OrganizationId.eq(org))
        .order_by_asc(entities::customer_api_keys::Column::Id)
        .all(&api.state.db)
        .await
        .unwrap()
        .into_iter()
        .map(|k| k.id)
        .collect();
    let (k1, k2, k3, rare) = (keys[0], keys[1], keys[2], keys[3]);
    let db = &api.state.db;
    let seed = Instant::now();
    let columns = "request_id, organization_id, api_key_id, group_id, route, model_requested, \
         model_served, account_id, input_tokens, output_tokens, cached_tokens, cache_write_tokens, \
         measurement, status, stream, cost_nanos, charged_nanos, wholesale_nanos, excess_nanos, \
         started_at, settled_at, audio_seconds, images, video_seconds, mirror_confirmed, latency_ms";
    let half = records / 2;
    for sql in [
        // The organization's half, evenly over 30 days, newest first by g.
        format!(
            "INSERT INTO usage_records ({columns}) \
             SELECT 'bench-' || g, {org}, (ARRAY[{k1},{k2},{k3}])[1 + g % 3], 1, 'chat_completions', m, m, 'a', \
             100, 10, 0, 0, 'exact', CASE WHEN g % 100 = 0 THEN 502 ELSE 200 END, false, \
             1000 + g % 997, 1000 + g % 997, 800 + g % 797, 0, t, t, 0, 0, 0, true, 200 + g % 1800 \
             FROM generate_series(1, {half}) g, \
             LATERAL (SELECT (ARRAY['gpt-4o','gpt-4o-mini','o3-mini'])[1 + (g / 7) % 3] AS m, \
                             now() - (g::float8 / {half}) * interval '30 days' AS t) x"
        ),
        // The rare key: ten calls over the 30 days.
        format!(
            "INSERT INTO usage_records ({columns}) \
             SELECT 'bench-rare-' || g, {org}, {rare}, 1, 'chat_completions', 'gpt-4o', 'gpt-4o', 'a', \
             100, 10, 0, 0, 'exact', 200, false, 5000, 5000, 4000, 0, t, t, 0, 0, 0, true, 900 \
             FROM generate_series(1, 10) g, LATERAL (SELECT now() - g * interval '3 days' AS t) x"
        ),
        // Nine other organizations.
        format!(
            "INSERT INTO usage_records ({columns}) \
             SELECT 'bench-o-' || g, {org} + 1000 + g % 9, 1, 1, 'chat_completions', 'gpt-4o', 'gpt-4o', 'a', \
             100, 10, 0, 0, 'exact', 200, false, 1000, 1000, 800, 0, t, t, 0, 0, 0, true, 300 \
             FROM generate_series(1, {}) g, \
             LATERAL (SELECT now() - (g::float8 / {records}) * interval '30 days' AS t) x",
            records - half
        ),
        "INSERT INTO usage_hourly (organization_id, api_key_id, model, hour_start, requests, input_tokens, \
         output_tokens, cached_tokens, cache_write_tokens, estimated_requests, cost_nanos, charged_nanos, \
         wholesale_nanos, images, video_seconds, failed_requests) \
         SELECT organization_id, api_key_id, model_served, date_trunc('hour', started_at), count(*), \
         sum(input_tokens), sum(output_tokens), sum(cached_tokens), sum(cache_write_tokens), 0, sum(cost_nanos), \
         sum(charged_nanos), sum(wholesale_nanos), 0, 0, count(*) FILTER (WHERE status >= 400) \
         FROM usage_records WHERE request_id LIKE 'bench-%' GROUP BY 1, 2, 3, 4"
            .to_string(),
        "ANALYZE".to_string(),
    ] {
        db.execute_unprepared(&sql).await.unwrap();
    }
    eprintln!(
        "bench: seeded {records} usage records ({half} of the organization's) in {:.1} s",
        seed.elapsed().as_secs_f64()
    );
    let path = format!("/console/orgs/{org}/requests");
    let second = {
        let first = owner.get(&path).await;
        older(&first.body).expect("a second page")
    };
    let deep = {
        let day = (chrono::Utc::now() - chrono::Duration::days(20)).date_naive();
        let page = owner.get(&format!("{path}?day={day}")).await;
        older(&page.body).expect("a second page of the day")
    };
    let day = (chrono::Utc::now() - chrono::Duration::days(15)).date_naive();
    for (what, p) in [
        ("newest 50 calls", path.clone()),
        ("newest 100 calls", format!("{path}?size=100")),
        ("the next (older) page", second),
        ("one day, 15 days back", format!("{path}?day={day}")),
        ("one day's second page, 20 days back", deep),
        ("one key", format!("{path}?key={k2}")),
        ("one model", format!("{path}?model=o3-mini")),
        ("failed calls (1 in 100)", format!("{path}?status=failed")),
        (
            "key, model and failed together",
            format!("{path}?key={k1}&model=gpt-4o&status=failed"),
        ),
        (
            "a key with ten calls in 30 days",
            format!("{path}?key={rare}"),
        ),
        (
            "a model never called",
            format!("{path}?model=no-such-model"),
        ),
    ] {
        let mut times = Vec::new();
        let mut rows = 0;
        for _ in 0..7 {
            let t = Instant::now();
            let page = owner.get(&p).await;
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(
                page.status,
                200,
                "{what}: {}",
                &page.body[..page.body.len().min(500)]
            );
            rows = ids(&page.body).len();
        }
        times.sort_by(f64::total_cmp);
        eprintln!(
            "bench: {what}: {rows} rows, median {:.0} ms, max {:.0} ms ({} runs)",
            times[times.len() / 2],
            times[times.len() - 1],
            times.len()
        );
    }
}
