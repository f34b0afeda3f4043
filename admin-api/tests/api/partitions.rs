//! The usage ledger at scale (issue 31): on PostgreSQL `usage_records` is one partition per
//! month, made ahead by a worker; a request is booked once whichever copy of its event comes
//! first; retention drops whole months while the rollups stay. SQLite keeps one table.

use super::*;
use admin_api::workers::partitions;
use chrono::{DateTime, Datelike, TimeDelta, Utc};
use migrations::usage_partitions::Month;
use sea_orm::{ConnectionTrait, DbBackend, EntityTrait, PaginatorTrait, Statement};

/// A UUIDv7 request id minted at `at`, as the gateway mints them.
pub(super) fn request_id_at(at: DateTime<Utc>) -> String {
    let ms = u64::try_from(at.timestamp_millis()).unwrap();
    let ts = uuid::Timestamp::from_unix(uuid::NoContext, ms / 1000, (ms % 1000) as u32 * 1_000_000);
    uuid::Uuid::new_v7(ts).simple().to_string()
}

fn month(t: DateTime<Utc>) -> Month {
    Month::new(t.year(), t.month()).unwrap()
}

async fn partitions_of(db: &sea_orm::DatabaseConnection) -> Vec<String> {
    let mut names: Vec<String> = db
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            migrations::usage_partitions::LIST_SQL,
        ))
        .await
        .unwrap()
        .iter()
        .map(|r| r.try_get::<String>("", "relname").unwrap())
        .collect();
    names.sort();
    names
}

/// The partition a request's record is in.
async fn partition_of(db: &sea_orm::DatabaseConnection, request_id: &str) -> String {
    db.query_one_raw(Statement::from_string(
        DbBackend::Postgres,
        format!("SELECT tableoid::regclass::text AS p FROM usage_records WHERE request_id = '{request_id}'"),
    ))
    .await
    .unwrap()
    .unwrap()
    .try_get::<String>("", "p")
    .unwrap()
}

async fn settle(api: &Api, events: &[opstate::UsageEvent]) {
    for e in events {
        api.state.stores.usage.append(e).await.unwrap();
    }
    admin_api::workers::settler::drain_once(&api.state, "t")
        .await
        .unwrap();
}

#[tokio::test]
async fn records_land_in_their_months_partition_and_each_request_is_booked_once() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (_, org) = api.active_customer(&owner, "parts", 10.0, 1.0).await;
    let now = Utc::now();
    let id = request_id_at(now);
    // The gateway's event and the reconciler's copy of one request (the video task's end dates
    // its event by the task, a few seconds later): the same request id, two start times.
    let mut first = settlement::settled_event(&id, org, "gpt-4o-mini", 0, 300_000, 300_000);
    first.started_at_ms = u64::try_from(now.timestamp_millis()).unwrap();
    let mut second = first.clone();
    second.started_at_ms += 5_000;
    settle(&api, &[first.clone(), second.clone()]).await;
    // And again, each in a batch of its own (a redelivery after the first was booked).
    settle(&api, &[second]).await;
    settle(&api, &[first]).await;
    let records = entities::usage_records::Entity::find()
        .all(&api.state.db)
        .await
        .unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    // Dated by the request id, to the millisecond.
    assert_eq!(
        records[0].started_at.timestamp_millis(),
        now.timestamp_millis()
    );
    let spend = admin_api::ledger::balance(
        &api.state.db,
        &admin_api::ledger::AccountRef::org_spend(org).code,
    )
    .await
    .unwrap();
    assert_eq!(spend, nano(300_000), "charged once");
    if api.state.db.get_database_backend() != DbBackend::Postgres {
        // SQLite keeps one table; the partition worker has nothing to do there.
        let round = partitions::round(&api.state.db, Some(1), now)
            .await
            .unwrap();
        assert_eq!(round, partitions::Round::default());
        return;
    }
    // The migration made this month and the three next, and the default partition.
    let names = partitions_of(&api.state.db).await;
    let current = month(now);
    for k in 0..=migrations::usage_partitions::AHEAD {
        assert!(names.contains(&current.plus(k).name()), "{names:?}");
    }
    assert!(names.contains(&"usage_records_default".to_string()));
    assert_eq!(partition_of(&api.state.db, &id).await, current.name());
    // A round with everything in place makes nothing.
    let round = partitions::round(&api.state.db, None, now).await.unwrap();
    assert_eq!(round, partitions::Round::default());
}

#[tokio::test]
async fn retention_drops_whole_old_months_and_keeps_the_rollups() {
    let api = Api::start().await;
    if api.state.db.get_database_backend() != DbBackend::Postgres {
        return; // PostgreSQL only (SQLite is covered by the test above).
    }
    let owner = api.owner("100").await;
    let (_, org) = api.active_customer(&owner, "retained", 10.0, 1.0).await;
    let now = Utc::now();
    let old = now - TimeDelta::days(100);
    let ancient = now - TimeDelta::days(800);
    let event_at = |at: DateTime<Utc>, charged: i64| {
        let mut e = settlement::settled_event(
            &request_id_at(at),
            org,
            "gpt-4o-mini",
            u64::try_from(at.timestamp_millis()).unwrap(),
            charged,
            charged,
        );
        e.started_at_ms = u64::try_from(at.timestamp_millis()).unwrap();
        e
    };
    let (recent, hundred_days, two_years) = (
        event_at(now, 1_000),
        event_at(old, 2_000),
        event_at(ancient, 4_000),
    );
    settle(
        &api,
        &[recent.clone(), hundred_days.clone(), two_years.clone()],
    )
    .await;
    // Months without a partition of their own went to the default partition.
    let db = &api.state.db;
    assert_eq!(
        partition_of(db, &hundred_days.request_id).await,
        "usage_records_default"
    );
    assert_eq!(
        partition_of(db, &two_years.request_id).await,
        "usage_records_default"
    );
    // A round dated in the old month makes its partition and moves its row in.
    let round = partitions::round(db, None, old).await.unwrap();
    assert!(round.made.contains(&month(old).name()), "{round:?}");
    assert_eq!(
        partition_of(db, &hundred_days.request_id).await,
        month(old).name()
    );
    // Thirty days of retention today: the old month is dropped whole, the two-year-old row
    // leaves the default partition, this month stays.
    let round = partitions::round(db, Some(30), now).await.unwrap();
    assert!(round.dropped.contains(&month(old).name()), "{round:?}");
    assert!(!round.dropped.contains(&month(now).name()), "{round:?}");
    assert_eq!(round.expired_rows, 1);
    let left: Vec<String> = entities::usage_records::Entity::find()
        .all(db)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.request_id)
        .collect();
    assert_eq!(left, vec![recent.request_id.clone()]);
    // The rollups stay: three hourly buckets, the charges of all three calls.
    let buckets = entities::usage_hourly::Entity::find()
        .all(db)
        .await
        .unwrap();
    assert_eq!(buckets.len(), 3);
    assert_eq!(buckets.iter().map(|b| b.charged_nanos).sum::<i64>(), 7_000);
    assert_eq!(
        entities::usage_hourly::Entity::find()
            .count(db)
            .await
            .unwrap(),
        3
    );
    // A second round finds nothing more to drop.
    let again = partitions::round(db, Some(30), now).await.unwrap();
    assert!(
        again.dropped.is_empty() && again.expired_rows == 0,
        "{again:?}"
    );
}

/// Migration 000017 on a ledger that already has records: every row is kept with its id, the
/// months from the oldest record's on get partitions, new rows continue the ids, and a request
/// id is still booked once.
#[tokio::test]
async fn partitioning_an_existing_ledger_keeps_every_record() {
    use migrations::{Migrator, MigratorTrait};
    let url = testkit::fresh_database_url().await;
    if !url.starts_with("postgres") {
        return; // SQLite: the migration changes nothing.
    }
    let db = sea_orm::Database::connect(&url).await.unwrap();
    Migrator::up(&db, Some(16)).await.unwrap();
    let now = Utc::now();
    let old = now - TimeDelta::days(70);
    let insert = |id: i64, request_id: String, at: DateTime<Utc>| {
        format!(
            "INSERT INTO usage_records (id, request_id, organization_id, api_key_id, group_id, \
             route, model_requested, model_served, account_id, input_tokens, output_tokens, \
             cached_tokens, measurement, status, stream, cost_nanos, charged_nanos, excess_nanos, \
             started_at, settled_at) VALUES ({id}, '{request_id}', 1, 1, 1, 'chat_completions', \
             'm', 'm', 'a', 1, 1, 0, 'exact', 200, false, 5, 5, 0, '{at}', '{at}')",
            at = at.to_rfc3339()
        )
    };
    // Records written before: dated by the event's own start, a millisecond or more off the
    // id's (a video task's end was dated by the task); one id of another form.
    let late = now - TimeDelta::minutes(3);
    let odd = "req-before".to_string();
    for (id, request_id, at) in [
        (7, request_id_at(old), old + TimeDelta::milliseconds(1)),
        (8, request_id_at(old), old),
        (40, request_id_at(late), late + TimeDelta::seconds(20)),
        (41, odd.clone(), late),
    ] {
        db.execute_unprepared(&insert(id, request_id, at))
            .await
            .unwrap();
    }
    Migrator::up(&db, None).await.unwrap();
    // Every gateway id's record is now dated by its id, as the settler writes them.
    for r in entities::usage_records::Entity::find()
        .all(&db)
        .await
        .unwrap()
    {
        let id = uuid::Uuid::try_parse(&r.request_id);
        match id.ok().and_then(|u| u.get_timestamp()) {
            Some(t) => {
                let (secs, nanos) = t.to_unix();
                let ms = i64::try_from(secs).unwrap() * 1000 + i64::from(nanos / 1_000_000);
                assert_eq!(r.started_at.timestamp_millis(), ms, "{}", r.request_id);
            }
            None => assert_eq!(r.started_at.timestamp_millis(), late.timestamp_millis()),
        }
    }
    let ids: Vec<i64> = entities::usage_records::Entity::find()
        .all(&db)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(ids, vec![7, 8, 40, 41]);
    let names = partitions_of(&db).await;
    let mut m = month(old);
    while m <= month(now).plus(migrations::usage_partitions::AHEAD) {
        assert!(names.contains(&m.name()), "{m:?} missing from {names:?}");
        m = m.next();
    }
    // A new row continues the ids; the same request id (and start) again is refused.
    let again = request_id_at(now);
    let fresh = insert(0, again.clone(), now)
        .replace("(id, ", "(")
        .replace("VALUES (0, ", "VALUES (");
    db.execute_unprepared(&fresh).await.unwrap();
    let max: i64 = db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            format!("SELECT id FROM usage_records WHERE request_id = '{again}'"),
        ))
        .await
        .unwrap()
        .unwrap()
        .try_get("", "id")
        .unwrap();
    assert!(max > 41, "{max}");
    assert!(db.execute_unprepared(&fresh).await.is_err(), "booked twice");
}

/// Reads `name` from the environment as a number, or `default`.
fn env_number(name: &str, default: i64) -> i64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

/// Median and max of `runs` timings of `f`, in ms.
async fn timed<F, Fut>(runs: usize, mut f: F) -> (f64, f64)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut times = Vec::new();
    for _ in 0..runs {
        let t = std::time::Instant::now();
        f().await;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], times[times.len() - 1])
}

/// The usage ledger at scale (issue 31): seeds `BENCH_RECORDS` usage records (default 100
/// million) over 90 days, in time order as a settler writes them, each with a request id as the
/// gateway mints them (its time in its first 12 hex digits), into monthly partitions on
/// PostgreSQL, one in a hundred of them an
/// organization's that is measured, with the hourly and partner rollups the settler would have
/// kept; then times each usage report at that size and the settler's sustained rows per second
/// (`BENCH_EVENTS` events, default 200,000, through the real settler). Not a pass/fail test: run
/// by `scripts/bench-ledger`, which prints the figures for the README.
#[tokio::test]
#[ignore = "a benchmark: scripts/bench-ledger runs it"]
async fn bench_the_ledger_at_scale() {
    use std::time::Instant;
    assert!(
        std::env::var("DATABASE_URL").is_ok_and(|u| u.starts_with("postgres")),
        "the benchmark runs on PostgreSQL (DATABASE_URL)"
    );
    let records = env_number("BENCH_RECORDS", 100_000_000);
    let orgs = env_number("BENCH_ORGS", 1_000);
    let events = env_number("BENCH_EVENTS", 200_000);
    let chunk = env_number("BENCH_CHUNK", 5_000_000);
    let api = Api::start().await;
    let owner = api.owner("1000000").await;
    // The measured organization: a real customer (ledger accounts, billing token, console).
    let (customer, org) = api
        .active_customer(&owner, "bench-ledger", 100_000.0, 1.0)
        .await;
    let db = &api.state.db;
    let name: String = db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT current_database()::text AS name",
        ))
        .await
        .unwrap()
        .unwrap()
        .try_get("", "name")
        .unwrap();
    eprintln!("bench: database {name}");
    let now = Utc::now();
    // The months of the 90 days and three ahead, made as the keeper makes them.
    partitions::round(db, None, now - TimeDelta::days(92))
        .await
        .unwrap();
    partitions::round(db, None, now).await.unwrap();
    let seed = Instant::now();
    let p = owner.id;
    db.execute_unprepared(&format!(
        "INSERT INTO organizations (name, slug, status, created_at, owner_email, activated_at) \
         SELECT 'Bench org ' || g, 'bench-' || g, 'active', now(), 'o' || g || '@bench.example', now() \
         FROM generate_series(1, {orgs}) g"
    ))
    .await
    .unwrap();
    db.execute_unprepared(&format!(
        "INSERT INTO customers (partner_id, external_id, organization_id, display_name, contact_email, \
         billing_mode, billing_allocation_mode, allocation_cap_nanos, created_at) \
         SELECT {p}, o.slug, o.id, o.name, o.owner_email, 'prepaid', 'partner_funded', 0, now() \
         FROM organizations o WHERE o.slug LIKE 'bench-%'"
    ))
    .await
    .unwrap();
    let first: i64 = db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT min(id) AS first FROM organizations WHERE slug LIKE 'bench-%'",
        ))
        .await
        .unwrap()
        .unwrap()
        .try_get("", "first")
        .unwrap();
    let mut lo = 1;
    while lo <= records {
        let hi = (lo + chunk - 1).min(records);
        let t = Instant::now();
        db.execute_unprepared(&format!(
            "INSERT INTO usage_records (request_id, organization_id, api_key_id, group_id, route, \
             model_requested, model_served, account_id, input_tokens, output_tokens, cached_tokens, \
             cache_write_tokens, measurement, status, stream, cost_nanos, charged_nanos, \
             wholesale_nanos, excess_nanos, started_at, settled_at, audio_seconds, images, \
             video_seconds, mirror_confirmed, project) \
             SELECT lpad(to_hex((extract(epoch FROM ts) * 1000)::bigint), 12, '0') || '7' \
             || lpad(to_hex(g), 19, '0'), CASE WHEN g % 100 = 0 THEN {org} ELSE {first} + (g % {orgs}) END, \
             1 + g % 3, 1, 'chat_completions', m, m, 'a', 100, 10, 0, 0, 'exact', 200, false, \
             1000 + (g % 997), 1000 + (g % 997), 800 + (g % 797), 0, ts, ts, 0, 0, 0, true, \
             CASE WHEN g % 7 = 0 THEN 'p' || (g % 5) END \
             FROM generate_series({lo}, {hi}) g, \
             LATERAL (SELECT CASE WHEN g % 2 = 0 THEN 'gpt-4o-mini' ELSE 'gpt-4o' END AS m, \
               now() - interval '90 days' + ((g::float8 / {records}) * interval '90 days') \
               + random() * interval '1 second' AS ts) x"
        ))
        .await
        .unwrap();
        eprintln!(
            "bench: seeded records {lo}..={hi} in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        lo = hi + 1;
    }
    let records_done = seed.elapsed();
    for sql in [
        "INSERT INTO usage_hourly (organization_id, api_key_id, model, hour_start, requests, input_tokens, \
         output_tokens, cached_tokens, cache_write_tokens, estimated_requests, cost_nanos, charged_nanos, \
         wholesale_nanos, images, video_seconds) \
         SELECT organization_id, api_key_id, model_served, date_trunc('hour', started_at), count(*), \
         sum(input_tokens), sum(output_tokens), sum(cached_tokens), sum(cache_write_tokens), 0, \
         sum(cost_nanos), sum(charged_nanos), sum(wholesale_nanos), 0, 0 \
         FROM usage_records GROUP BY 1, 2, 3, 4"
            .to_string(),
    ]
    .into_iter()
    .chain(migrations::partner_usage_backfill(DbBackend::Postgres))
    .chain(["ANALYZE".to_string()])
    {
        db.execute_unprepared(&sql).await.unwrap();
    }
    let size: i64 = db
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT sum(pg_total_relation_size(c.oid))::bigint AS bytes FROM pg_inherits i \
             JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent \
             WHERE p.relname = 'usage_records'",
        ))
        .await
        .unwrap()
        .unwrap()
        .try_get("", "bytes")
        .unwrap();
    let hourly = api.count("usage_hourly").await;
    eprintln!(
        "bench: seeded {records} usage records of {} organizations in {:.0} s (records {:.0} s, \
         rollups {:.0} s): {:.1} GiB with indexes, {hourly} hourly buckets",
        orgs + 1,
        seed.elapsed().as_secs_f64(),
        records_done.as_secs_f64(),
        (seed.elapsed() - records_done).as_secs_f64(),
        size as f64 / f64::from(1u32 << 30)
    );
    // Each usage report, on the measured organization (a hundredth of the records).
    let token = api.billing_token(org).await;
    let mut person = console::joined(
        &api,
        Some(org),
        None,
        "owner2@bench-ledger.example",
        "owner",
    )
    .await;
    let mut partner_person =
        console::joined(&api, None, Some(p), "olga@bench-ledger.example", "owner").await;
    let today = now.date_naive();
    let week = today - chrono::Duration::days(6);
    let day = today - chrono::Duration::days(10);
    let start = (now - TimeDelta::days(30))
        .format("%Y-%m-%dT%H:00:00Z")
        .to_string();
    let end = now.format("%Y-%m-%dT%H:00:00Z").to_string();
    let billing = |path: String| {
        let (api, token) = (&api, token.clone());
        async move {
            let resp = api
                .http
                .get(format!("{}{path}", api.base))
                .bearer_auth(token)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200, "{path}");
            resp.bytes().await.unwrap();
        }
    };
    let (m, x) = timed(7, || billing("/api/v1/organization/billing/balance".into())).await;
    eprintln!("bench: billing balance: median {m:.0} ms, max {x:.0} ms");
    let (m, x) = timed(7, || {
        billing(format!(
            "/api/v1/organization/billing/usage/daily?date={day}"
        ))
    })
    .await;
    eprintln!(
        "bench: billing daily usage (keys, models, projects, workflows): median {m:.0} ms, max {x:.0} ms"
    );
    for (what, query) in [
        (
            "partner API customer usage, 30 days by day",
            format!("start_time={start}&end_time={end}"),
        ),
        (
            "partner API customer usage, 7 days by hour",
            format!(
                "granularity=hour&start_time={}&end_time={end}",
                (now - TimeDelta::days(7)).format("%Y-%m-%dT%H:00:00Z")
            ),
        ),
    ] {
        let path = format!("/customers/{customer}/usage?{query}");
        let (m, x) = timed(7, || {
            let (api, owner, path) = (&api, owner.clone(), path.clone());
            async move {
                let (s, v) = api.get(&owner, &path).await;
                assert_eq!(s, 200, "{v}");
            }
        })
        .await;
        eprintln!("bench: {what}: median {m:.0} ms, max {x:.0} ms");
    }
    for (what, path, who) in [
        (
            "console, organization usage (default window)",
            format!("/console/orgs/{org}/usage"),
            0,
        ),
        (
            "console, partner usage, 30 days by customer",
            format!("/console/partners/{p}/usage"),
            1,
        ),
        (
            "console, partner usage, 7 days by hour and model",
            format!("/console/partners/{p}/usage?granularity=hour&from={week}&to={today}&by=model"),
            1,
        ),
    ] {
        let mut times = Vec::new();
        for _ in 0..7 {
            let b = if who == 0 {
                &mut person
            } else {
                &mut partner_person
            };
            let t = Instant::now();
            let page = b.get(&path).await;
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(page.status, 200, "{what}");
        }
        times.sort_by(f64::total_cmp);
        eprintln!(
            "bench: {what}: median {:.0} ms, max {:.0} ms",
            times[times.len() / 2],
            times[times.len() - 1]
        );
    }
    // `first` itself has none: its share went to the measured organization.
    generations_at_scale(&api, &owner, customer, org, first + 1).await;
    // The settler's sustained rate at this size: events of the measured organization (v7 ids of
    // now), drained batch by batch by the real settler into the partitioned ledger.
    let usage = api.state.stores.usage.clone();
    let mut appended = 0;
    while appended < events {
        let at = Utc::now();
        let mut e =
            settlement::settled_event(&request_id_at(at), org, "gpt-4o-mini", 0, 1_000, 1_000);
        e.started_at_ms = u64::try_from(at.timestamp_millis()).unwrap();
        usage.append(&e).await.unwrap();
        appended += 1;
    }
    let t = Instant::now();
    let mut settled = 0usize;
    loop {
        let n = admin_api::workers::settler::drain_once(&api.state, "bench")
            .await
            .unwrap();
        if n == 0 {
            break;
        }
        settled += n;
    }
    let secs = t.elapsed().as_secs_f64();
    eprintln!(
        "bench: settler: {settled} events in {secs:.1} s: {:.0} rows/s sustained (batches of 200, one transaction each)",
        settled as f64 / secs
    );
}

/// `GET /compat/v1/generations/{id}` at scale (issue 45): seven of the measured organization's
/// calls spread over the 90 days, each read once with one of its keys (every read a different
/// record, the first of each cold), and seven of another organization's (404, the same path).
async fn generations_at_scale(api: &Api, owner: &Partner, customer: i64, org: i64, other: i64) {
    let (s, k) = api
        .write(
            owner,
            Method::POST,
            &format!("/customers/{customer}/api-keys"),
            Some(&json!({"name": "bench", "group_id": 1})),
        )
        .await;
    assert_eq!(s, 200, "{k}");
    let key = k["data"]["key"].as_str().unwrap().to_string();
    let ids = |org: i64| async move {
        let mut ids = Vec::new();
        for days in [89, 75, 60, 45, 30, 15, 1] {
            let sql = format!(
                "SELECT request_id FROM usage_records WHERE organization_id = {org} \
                 AND started_at >= now() - interval '{days} days' ORDER BY started_at LIMIT 1"
            );
            let row = api
                .state
                .db
                .query_one_raw(Statement::from_string(DbBackend::Postgres, sql))
                .await
                .unwrap()
                .unwrap();
            ids.push(row.try_get::<String>("", "request_id").unwrap());
        }
        ids
    };
    for (what, ids, want) in [
        ("compat generation, the caller's call", ids(org).await, 200),
        (
            "compat generation, another organization's call (404)",
            ids(other).await,
            404,
        ),
    ] {
        let mut ids = ids.into_iter();
        let (m, x) = timed(7, || {
            let id = ids.next().unwrap();
            let (api, key) = (api, key.clone());
            async move {
                let resp = api
                    .http
                    .get(format!("{}/compat/v1/generations/{id}", api.base))
                    .bearer_auth(key)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(resp.status(), want, "{id}");
                resp.bytes().await.unwrap();
            }
        })
        .await;
        eprintln!("bench: {what}: median {m:.1} ms, max {x:.1} ms");
    }
}
