//! Usage reports: the partner's per-customer usage routes and windows, and the billing API's daily
//! breakdown by project and workflow.

use super::*;

#[tokio::test]
async fn usage_routes_and_windows() {
    let api = Api::start().await;
    let owner = api.owner("0").await;
    let (id, _) = api.active_customer(&owner, "use", 0.0, 1.0).await;
    let (s, v) = api.get(&owner, &format!("/customers/{id}/usage")).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["data"]["granularity"], "day");
    let buckets = v["data"]["buckets"].as_array().unwrap();
    assert!((7..=8).contains(&buckets.len()), "{}", buckets.len());
    assert_eq!(buckets[0]["burn_usd"], 0);
    for key in ["requests", "total_tokens", "active_api_keys"] {
        assert_eq!(buckets[0][key], 0, "{key}");
    }
    let (s, v) = api
        .get(&owner, &format!("/customers/{id}/usage?granularity=hour"))
        .await;
    assert_eq!(s, 200);
    assert!((24..=25).contains(&v["data"]["buckets"].as_array().unwrap().len()));
    let (s, v) = api
        .get(&owner, &format!("/customers/{id}/usage?granularity=minute"))
        .await;
    assert_error(s, &v, 400, "INVALID_PARTNER_USAGE_GRANULARITY");
    for q in [
        "start_time=yesterday",
        "granularity=hour&start_time=2020-01-01T00:00:00Z&end_time=2020-01-09T00:00:00Z",
        "start_time=2026-02-01T00:00:00Z&end_time=2026-01-01T00:00:00Z",
    ] {
        let (s, v) = api.get(&owner, &format!("/customers/{id}/usage?{q}")).await;
        assert_error(s, &v, 400, "INVALID_PARTNER_USAGE_WINDOW");
    }
    let (s, v) = api.get(&owner, "/customers/999/usage").await;
    assert_error(s, &v, 404, "PARTNER_CUSTOMER_NOT_FOUND");
}

#[tokio::test]
async fn daily_usage_breaks_down_by_project_and_workflow() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (_, org) = api.active_customer(&owner, "attr", 10.0, 1.0).await;
    let token = api.billing_token(org).await;
    let day = chrono::NaiveDate::from_ymd_opt(2026, 3, 4).unwrap();
    let started = u64::try_from(
        day.and_hms_opt(12, 0, 0)
            .unwrap()
            .and_utc()
            .timestamp_millis(),
    )
    .unwrap();
    for (i, project) in [Some("checkout"), Some("checkout"), None]
        .into_iter()
        .enumerate()
    {
        let event = opstate::UsageEvent {
            request_id: format!("r{i}"),
            key_id: 1,
            org_id: org,
            group_id: 1,
            route: "chat_completions".into(),
            model_requested: "gpt-4o-mini".into(),
            model_served: "gpt-4o-mini".into(),
            account_id: "a".into(),
            input_tokens: 100,
            output_tokens: 10,
            cached_tokens: 20,
            // Prompt-cache writes are metered apart (and rolled up apart).
            cache_write_tokens: 30,
            cache_write_1h_tokens: 0,
            measurement: if i == 2 {
                opstate::Measurement::Estimated
            } else {
                opstate::Measurement::Exact
            },
            status: 200,
            stream: false,
            started_at_ms: started,
            latency_ms: 1,
            ttfb_ms: None,
            attempts: 1,
            cost_nanos: nano(1_000),
            charged_nanos: nano(0),
            excess_nanos: nano(0),
            hold_nanos: nano(0),
            project: project.map(str::to_string),
            workflow: None,
            audio_seconds: 0,
            // One image call among them: its images are counted in every breakdown.
            images: if i == 1 { 3 } else { 0 },
            video_seconds: 0,
            retail_rate: None,
            wholesale_rate: None,
            resent: false,
            supplier: Default::default(),
            batch: None,
        };
        api.state.stores.usage.append(&event).await.unwrap();
    }
    admin_api::workers::settler::drain_once(&api.state, "t")
        .await
        .unwrap();
    let v: Value = api
        .http
        .get(format!(
            "{}/api/v1/organization/billing/usage/daily?date=2026-03-04",
            api.base
        ))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let d = &v["data"];
    assert_eq!(d["totals"]["requests"], 3, "{v}");
    assert_eq!(d["totals"]["images"], 3, "{v}");
    assert_eq!(d["models"][0]["images"], 3, "{v}");
    assert_eq!(
        (
            d["totals"]["cache_tokens"].as_i64(),
            d["totals"]["cache_write_tokens"].as_i64()
        ),
        (Some(60), Some(90)),
        "{v}"
    );
    assert_eq!(d["models"][0]["cache_write_tokens"], 90, "{v}");
    assert!(
        d["projects"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["cache_write_tokens"].as_i64().unwrap() % 30 == 0)
    );
    let records = {
        use sea_orm::EntityTrait;
        entities::usage_records::Entity::find()
            .all(&api.state.db)
            .await
            .unwrap()
    };
    assert!(
        records.iter().all(|r| r.cache_write_tokens == 30),
        "stored on each usage record"
    );
    assert_eq!(
        d["projects"].as_array().unwrap().len(),
        2,
        "checkout and unattributed: {v}"
    );
    assert!(
        d["projects"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["project"] == "checkout" && p["requests"] == 2 && p["images"] == 3)
    );
    assert_eq!(d["unavailable_dimensions"], json!(["workflows"]));
    assert_eq!(d["usage_coverage"]["estimated_requests"], 1);
    assert_eq!(d["api_keys"][0]["api_key_id"], 1);
}
