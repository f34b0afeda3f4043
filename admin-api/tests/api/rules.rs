//! Rules that watch balances (issue 32): low-balance alerts and automatic allocations, set over
//! the partner API, acted on by the watcher once per crossing, also with several watchers at once.

use super::*;
use admin_api::services::watch::watch_once;

/// The mails in the outbox whose text contains `needle`.
fn mails(api: &Api, needle: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(&api.outbox) else {
        return Vec::new();
    };
    dir.filter_map(|e| std::fs::read_to_string(e.unwrap().path()).ok())
        .filter(|m| m.contains(needle))
        .collect()
}

/// Spends `nanos` of organization `org` as a settled call does (held, settled, booked by the
/// settler), so mirror and ledger agree.
async fn spend(api: &Api, org: i64, id: &str, nanos: i64) {
    let s = &api.state;
    let asks = [opstate::SlotAsk {
        account: "a",
        max: 100,
    }];
    let admitted = s
        .stores
        .calls
        .admit(
            &asks,
            id,
            std::time::Duration::from_secs(30),
            opstate::Limits::default(),
            Some(opstate::HoldAsk {
                org,
                hold_id: id,
                amount: nano(nanos),
                ttl_ms: 60_000,
                meta: "",
                spend: None,
            }),
        )
        .await
        .unwrap();
    assert_eq!(admitted.taken, Some(0), "{admitted:?}");
    let now_ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap();
    let event = super::settlement::settled_event(id, org, "gpt-4o-mini", now_ms, nanos, 0);
    s.stores
        .calls
        .finish(opstate::Finish {
            slot: Some(("a", id)),
            gates: &[],
            hold: Some((org, id)),
            cost: nano(nanos),
            event: Some(&event),
        })
        .await
        .unwrap();
    admin_api::workers::settler::drain_once(s, "t")
        .await
        .unwrap();
}

const USD: i64 = 1_000_000_000;

#[tokio::test]
async fn alert_settings_refuse_bad_values_and_other_partners_customers() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let other = api.owner("100").await;
    let (id, _) = api.active_customer(&owner, "alerts", 10.0, 1.0).await;
    let path = format!("/customers/{id}/low-balance-alert");
    for body in [
        json!({}),
        json!({"threshold_usd": -1}),
        json!({"threshold_usd": "5"}),
        json!({"threshold_usd": 2_000_000}),
        json!({"threshold_usd": 5, "extra": 1}),
    ] {
        let (s, v) = api.write(&owner, Method::PUT, &path, Some(&body)).await;
        assert_error(s, &v, 400, "INVALID_PARTNER_ALERT");
    }
    assert_eq!(api.count("balance_alerts").await, 0);
    let (s, v) = api
        .write(
            &other,
            Method::PUT,
            &path,
            Some(&json!({"threshold_usd": 5})),
        )
        .await;
    assert_error(s, &v, 404, "PARTNER_CUSTOMER_NOT_FOUND");
    let (s, v) = api
        .write(
            &owner,
            Method::PUT,
            &path,
            Some(&json!({"threshold_usd": 5.5})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["data"],
        json!({"threshold_usd": 5.5, "below": false, "alerted_at": null})
    );
    let (_, v) = api.get(&owner, &path).await;
    assert_eq!(v["data"]["threshold_usd"], 5.5);
    let (s, v) = api
        .write(
            &owner,
            Method::PUT,
            &path,
            Some(&json!({"threshold_usd": null})),
        )
        .await;
    assert_eq!(
        (s.as_u16(), &v["data"]["threshold_usd"]),
        (200, &Value::Null)
    );
    assert_eq!(api.count("balance_alerts").await, 0);
    // The partner's own funding.
    let (s, v) = api
        .write(
            &owner,
            Method::PUT,
            "/funding/low-balance-alert",
            Some(&json!({"threshold_usd": 50})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let (_, v) = api.get(&owner, "/funding/low-balance-alert").await;
    assert_eq!(v["data"]["threshold_usd"], 50);
    let (_, v) = api.get(&other, "/funding/low-balance-alert").await;
    assert_eq!(v["data"]["threshold_usd"], Value::Null);
}

/// An Api on the in-memory store, and one on Redis when `REDIS_URL` is set.
async fn on_both_stores() -> Vec<Api> {
    let mut out = vec![Api::start().await];
    if let Some(url) = testkit::redis_url() {
        let stores = Stores::redis(&url, &testkit::redis_prefix("rules"))
            .await
            .unwrap();
        out.push(Api::start_on("", stores).await);
    }
    out
}

#[tokio::test]
async fn a_low_balance_alert_mails_once_per_crossing() {
    for api in on_both_stores().await {
        low_balance_alert(api).await;
    }
}

/// How many webhook events of `event_type` the outbox holds.
pub(super) async fn webhook_events(api: &Api, event_type: &str) -> usize {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    entities::webhook_events::Entity::find()
        .filter(entities::webhook_events::Column::EventType.eq(event_type))
        .all(&api.state.db)
        .await
        .unwrap()
        .len()
}

async fn low_balance_alert(api: Api) {
    let owner = api.owner("100").await;
    let (id, org) = api.active_customer(&owner, "lowbal", 10.0, 1.0).await;
    let (s, _) = api
        .write(
            &owner,
            Method::PUT,
            &format!("/customers/{id}/low-balance-alert"),
            Some(&json!({"threshold_usd": 5})),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(
        watch_once(&api.state).await.unwrap().alerts_sent,
        0,
        "10 ≥ 5"
    );
    spend(&api, org, "lb-1", 6 * USD).await;
    assert_eq!(watch_once(&api.state).await.unwrap().alerts_sent, 1);
    let sent = mails(&api, "Low balance: Org lowbal");
    assert_eq!(sent.len(), 1, "one mail to the organization's owner");
    assert!(sent[0].contains("owner@lowbal.example"), "{}", sent[0]);
    assert!(sent[0].contains("4 USD available"), "{}", sent[0]);
    assert_eq!(
        webhook_events(&api, "organization.balance_low").await,
        1,
        "the partner's webhook event, with the crossing"
    );
    // Still below: nothing more, however many passes and calls.
    spend(&api, org, "lb-2", USD).await;
    for _ in 0..3 {
        assert_eq!(watch_once(&api.state).await.unwrap().alerts_sent, 0);
    }
    assert_eq!(mails(&api, "Low balance: Org lowbal").len(), 1);
    // Back above (an allocation), then below again: one more mail.
    let (s, _) = api
        .write(
            &owner,
            Method::POST,
            &format!("/customers/{id}/allocations"),
            Some(&json!({"action": "increase", "amount_usd": 10})),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(watch_once(&api.state).await.unwrap().alerts_sent, 0);
    spend(&api, org, "lb-3", 9 * USD).await;
    assert_eq!(watch_once(&api.state).await.unwrap().alerts_sent, 1);
    assert_eq!(mails(&api, "Low balance: Org lowbal").len(), 2);
    assert_eq!(webhook_events(&api, "organization.balance_low").await, 2);
    // An unknown balance is neither above nor below: a mirror out of step alerts nothing.
    let (_, v) = api
        .get(&owner, &format!("/customers/{id}/low-balance-alert"))
        .await;
    assert_eq!(v["data"]["below"], true);
}

#[tokio::test]
async fn automatic_allocation_once_per_crossing_with_many_watchers() {
    for api in on_both_stores().await {
        automatic_allocation(api).await;
    }
}

async fn automatic_allocation(api: Api) {
    let owner = api.owner("100").await;
    let (id, org) = api.active_customer(&owner, "auto", 10.0, 1.0).await;
    let path = format!("/customers/{id}/automatic-allocation");
    for body in [
        json!({"below_usd": 5, "amount_usd": 10}),
        json!({"below_usd": 0, "amount_usd": 10, "monthly_cap_usd": 30}),
        json!({"below_usd": 5, "amount_usd": 40, "monthly_cap_usd": 30}),
        json!({"below_usd": 5, "amount_usd": "10", "monthly_cap_usd": 30}),
        json!({"below_usd": 5, "amount_usd": 10, "monthly_cap_usd": 30, "x": 1}),
    ] {
        let (s, v) = api.write(&owner, Method::PUT, &path, Some(&body)).await;
        assert_error(s, &v, 400, "INVALID_PARTNER_AUTOMATIC_ALLOCATION");
    }
    let (s, v) = api
        .write(
            &owner,
            Method::PUT,
            &path,
            Some(&json!({"below_usd": 5, "amount_usd": 10, "monthly_cap_usd": 15})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["data"]["rule"]["armed"], true);
    assert_eq!(v["data"]["rule"]["allocated_this_month_usd"], 0);

    // Above the threshold: nothing. Below: many watchers on two admin-api states at once make
    // exactly one allocation.
    assert_eq!(watch_once(&api.state).await.unwrap().allocated, 0);
    spend(&api, org, "aa-1", 6 * USD).await;
    let second = admin_api::AppState::connect(api.state.settings.clone(), api.state.stores.clone())
        .await
        .unwrap();
    let passes = futures_util::future::join_all(
        (0..8).map(|i| watch_once(if i % 2 == 0 { &api.state } else { &second })),
    )
    .await;
    let allocated: usize = passes.iter().map(|p| p.as_ref().unwrap().allocated).sum();
    assert_eq!(allocated, 1, "{passes:?}");
    let (_, balance) = api.get(&owner, &format!("/customers/{id}/balance")).await;
    assert_eq!(
        balance["data"]["organization_available_usd"], 14,
        "{balance}"
    );
    let (_, v) = api.get(&owner, &path).await;
    assert_eq!(v["data"]["rule"]["allocated_this_month_usd"], 10, "{v}");
    assert_eq!(v["data"]["runs"][0]["outcome"], "allocated", "{v}");
    assert_eq!(v["data"]["runs"].as_array().unwrap().len(), 1);
    // Recorded in the ledger like a manual allocation.
    assert_eq!(api.count("auto_allocations").await, 1);

    // Back above (14 ≥ 5) re-arms it; the next crossing would pass the month's cap (10 + 10 >
    // 15): refused, recorded, and nothing moved.
    assert_eq!(watch_once(&api.state).await.unwrap().allocated, 0);
    spend(&api, org, "aa-2", 10 * USD).await;
    let pass = watch_once(&api.state).await.unwrap();
    assert_eq!((pass.allocated, pass.refused), (0, 1));
    let (_, v) = api.get(&owner, &path).await;
    assert_eq!(v["data"]["runs"][0]["outcome"], "refused_cap", "{v}");
    let (_, balance) = api.get(&owner, &format!("/customers/{id}/balance")).await;
    assert_eq!(
        balance["data"]["organization_available_usd"], 4,
        "{balance}"
    );
    assert_eq!(watch_once(&api.state).await.unwrap(), Default::default());

    // Removed: the runs stay visible.
    let (s, v) = api.write(&owner, Method::DELETE, &path, None).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["data"]["rule"], Value::Null);
    assert_eq!(v["data"]["runs"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn an_automatic_allocation_partner_funding_cannot_cover_is_refused() {
    let api = Api::start().await;
    // 12 USD of funding: 10 go to the customer's initial allocation.
    let owner = api.owner("12").await;
    let (id, org) = api.active_customer(&owner, "short", 10.0, 1.0).await;
    super::console::joined(&api, None, Some(owner.id), "pat@partner.example", "owner").await;
    let (s, _) = api
        .write(
            &owner,
            Method::PUT,
            &format!("/customers/{id}/automatic-allocation"),
            Some(&json!({"below_usd": 5, "amount_usd": 10, "monthly_cap_usd": 100})),
        )
        .await;
    assert_eq!(s, 200);
    spend(&api, org, "sf-1", 6 * USD).await;
    let before = api.funding(&owner).await;
    let pass = watch_once(&api.state).await.unwrap();
    assert_eq!((pass.allocated, pass.refused), (0, 1));
    assert_eq!(api.funding(&owner).await, before, "nothing moved");
    let (_, v) = api
        .get(&owner, &format!("/customers/{id}/automatic-allocation"))
        .await;
    assert_eq!(v["data"]["runs"][0]["outcome"], "refused_funding", "{v}");
    assert_eq!(v["data"]["rule"]["armed"], false, "{v}");
    let told = mails(&api, "Automatic allocation refused");
    assert_eq!(told.len(), 1, "the partner's owners are told");
    assert!(
        told[0].contains("pat@partner.example") && told[0].contains("funding"),
        "{}",
        told[0]
    );
    // Once per crossing: the next passes do not try again.
    assert_eq!(watch_once(&api.state).await.unwrap(), Default::default());
}

/// The forms of both consoles: the partner's team sets a customer's alert and automatic
/// allocation (the API's rules and reasons) and its own funding alert; the organization's owner
/// sets its alert and sees the rule and its runs; a member may not, even with a forged post.
#[tokio::test]
async fn both_consoles_set_and_show_the_rules() {
    use super::console::joined;
    let api = Api::start().await;
    let acme = api.owner("100").await;
    let (id, org) = api.active_customer(&acme, "consoled", 10.0, 1.0).await;
    let mut olga = joined(&api, None, Some(acme.id), "olga@acme.example", "owner").await;
    let path = format!("/console/partners/{}/customers/{id}", acme.id);
    let page = olga.get(&path).await;
    assert!(
        page.body.contains("No automatic allocation is set."),
        "{}",
        page.body
    );
    let csrf = page.csrf();
    let bad = olga
        .post(
            &format!("{path}/automatic-allocation"),
            &[
                ("csrf", &csrf),
                ("action", "set"),
                ("below_usd", "5"),
                ("amount_usd", "50"),
                ("monthly_cap_usd", "20"),
            ],
            None,
        )
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(
        bad.body.contains("INVALID_PARTNER_AUTOMATIC_ALLOCATION"),
        "{}",
        bad.body
    );
    assert!(watch_rule(&api, id).await.is_none(), "nothing saved");
    let set = olga
        .post(
            &format!("{path}/automatic-allocation"),
            &[
                ("csrf", &csrf),
                ("action", "set"),
                ("below_usd", "5"),
                ("amount_usd", "10"),
                ("monthly_cap_usd", "20"),
            ],
            None,
        )
        .await;
    assert_eq!(set.status, 200, "{}", set.body);
    assert!(
        set.body.contains("The automatic allocation is set."),
        "{}",
        set.body
    );
    assert!(
        set.body.contains(
            "allocate <strong><data value=\"10\" title=\"10 USD\">10.00</data> USD</strong>"
        ),
        "{}",
        set.body
    );
    let alert = olga
        .post(
            &format!("{path}/alert"),
            &[("csrf", &csrf), ("threshold_usd", "3")],
            None,
        )
        .await;
    assert_eq!(alert.status, 200, "{}", alert.body);
    assert!(
        alert
            .body
            .contains("below <strong><data value=\"3\" title=\"3 USD\">3.00</data> USD</strong>"),
        "{}",
        alert.body
    );
    let funding = format!("/console/partners/{}/funding", acme.id);
    let saved = olga
        .post(
            &format!("{funding}/alert"),
            &[("csrf", &csrf), ("threshold_usd", "40")],
            None,
        )
        .await;
    assert_eq!(saved.status, 200, "{}", saved.body);
    assert!(
        saved.body.contains(
            "below <strong><data value=\"40\" title=\"40 USD\">40.00</data> USD</strong>"
        ),
        "{}",
        saved.body
    );
    let (_, v) = api.get(&acme, "/funding/low-balance-alert").await;
    assert_eq!(v["data"]["threshold_usd"], 40);

    // Another partner's customer forged into the URL: not found, nothing changed.
    let other = api.owner("10").await;
    let (theirs, _) = api.active_customer(&other, "theirs", 1.0, 1.0).await;
    let forged = olga
        .post(
            &format!("/console/partners/{}/customers/{theirs}/alert", acme.id),
            &[("csrf", &csrf), ("threshold_usd", "1")],
            None,
        )
        .await;
    assert_eq!(forged.status, 404, "{}", forged.body);
    let forged = olga
        .post(
            &format!(
                "/console/partners/{}/customers/{theirs}/automatic-allocation",
                other.id
            ),
            &[("csrf", &csrf), ("action", "remove")],
            None,
        )
        .await;
    assert_eq!(forged.status, 404, "{}", forged.body);
    let (_, v) = api
        .get(&other, &format!("/customers/{theirs}/low-balance-alert"))
        .await;
    assert_eq!(v["data"]["threshold_usd"], Value::Null, "{v}");

    // The rule acts; both consoles show the run.
    spend(&api, org, "cs-1", 6 * USD).await;
    assert_eq!(watch_once(&api.state).await.unwrap().allocated, 1);
    let page = olga.get(&path).await;
    assert!(page.body.contains("<td>allocated</td>"), "{}", page.body);

    let mut owner = joined(&api, Some(org), None, "ann@consoled.example", "owner").await;
    let overview = owner.get(&format!("/console/orgs/{org}")).await;
    assert!(
        overview.body.contains(
            "allocates <strong><data value=\"10\" title=\"10 USD\">10.00</data> USD</strong>"
        ) && overview.body.contains("<td>allocated</td>")
            && overview.body.contains(
                "below <strong><data value=\"3\" title=\"3 USD\">3.00</data> USD</strong>"
            ),
        "{}",
        overview.body
    );
    let csrf = overview.csrf();
    let changed = owner
        .post(
            &format!("/console/orgs/{org}/alert"),
            &[("csrf", &csrf), ("threshold_usd", "7.5")],
            None,
        )
        .await;
    assert_eq!(changed.status, 200, "{}", changed.body);
    assert!(
        changed.body.contains(
            "below <strong><data value=\"7.5\" title=\"7.5 USD\">7.50</data> USD</strong>"
        ),
        "{}",
        changed.body
    );
    let refused = owner
        .post(
            &format!("/console/orgs/{org}/alert"),
            &[("csrf", &csrf), ("threshold_usd", "-2")],
            None,
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    let (_, v) = api
        .get(&acme, &format!("/customers/{id}/low-balance-alert"))
        .await;
    assert_eq!(
        v["data"]["threshold_usd"], 7.5,
        "the refused value changed nothing"
    );

    // A member reads but may not set it, even posting the form by hand.
    let mut member = joined(&api, Some(org), None, "max@consoled.example", "member").await;
    let page = member.get(&format!("/console/orgs/{org}")).await;
    assert!(!page.body.contains("Save alert"), "{}", page.body);
    let forged = member
        .post(
            &format!("/console/orgs/{org}/alert"),
            &[("csrf", &page.csrf()), ("threshold_usd", "1")],
            None,
        )
        .await;
    assert_eq!(forged.status, 403, "{}", forged.body);
    let (_, v) = api
        .get(&acme, &format!("/customers/{id}/low-balance-alert"))
        .await;
    assert_eq!(v["data"]["threshold_usd"], 7.5);
    assert!(
        api.count("audit_records").await >= 4,
        "every change audited"
    );
}

async fn watch_rule(api: &Api, customer: i64) -> Option<entities::auto_allocation_rules::Model> {
    admin_api::services::allocations::rule_of(&api.state.db, customer)
        .await
        .unwrap()
}
