//! Audit without gaps (issue 42): money and keys changed by programs are recorded in the change's
//! own transaction, with who made them — a partner-API write with its token, a funding credit
//! with its source, an operator's billing-token change and invitation re-issue.

use super::console::audit_texts;
use super::*;

#[tokio::test]
async fn programs_changes_are_audited_with_who_made_them() {
    let api = Api::start().await;
    let p = api.owner("100").await;
    let (customer, org) = api.active_customer(&p, "audited", 10.0, 1.0).await;
    let (s, v) = api
        .write(
            &p,
            Method::POST,
            &format!("/customers/{customer}/allocations"),
            Some(&json!({"action": "increase", "amount_usd": 1})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let (_, me) = api.get(&p, "/me").await;
    let preview = me["data"]["token"]["preview"].as_str().unwrap().to_string();
    let audit = audit_texts(&api).await;
    let writes: Vec<&String> = audit
        .iter()
        .filter(|a| a.starts_with("partner_api_write"))
        .collect();
    assert!(
        writes.iter().any(|a| a.contains(&format!(
            "POST /partner/v1/customers/{customer}/allocations"
        )) && a.contains(&preview)),
        "{writes:#?}"
    );
    assert!(
        writes
            .iter()
            .any(|a| a.contains("PUT /partner/v1/customers/by-external-id/audited")),
        "{writes:#?}"
    );
    // A refused write is not recorded as a write.
    let before = writes.len();
    let (s, _) = api
        .write(
            &p,
            Method::POST,
            &format!("/customers/{customer}/allocations"),
            Some(&json!({"action": "increase", "amount_usd": -1})),
        )
        .await;
    assert_eq!(s, 400);
    let after = audit_texts(&api)
        .await
        .iter()
        .filter(|a| a.starts_with("partner_api_write"))
        .count();
    assert_eq!(after, before);
    // A funding credit, with its source; once per reference.
    for _ in 0..2 {
        admin_api::cli::partner_fund(&api.state, p.id, "5", Some("pay-1"))
            .await
            .unwrap();
    }
    let credits: Vec<String> = audit_texts(&api)
        .await
        .into_iter()
        .filter(|a| a.starts_with("funding_added") && a.contains("fund:pay-1"))
        .collect();
    assert_eq!(credits.len(), 1, "{credits:#?}");
    assert!(credits[0].contains("operator"), "{credits:#?}");
    // The operator's billing-token commands and an invitation's re-issue.
    admin_api::cli::billing_token(&api.state, "create", org)
        .await
        .unwrap();
    admin_api::cli::billing_token(&api.state, "rotate", org)
        .await
        .unwrap();
    let (s, pending) = api.create(&p, "audited-pending", 1.0, 1.0).await;
    assert_eq!(s, 200);
    let pending_id = pending["data"]["customer"]["id"].as_i64().unwrap();
    admin_api::cli::invitation(&api.state, "reissue", pending_id)
        .await
        .unwrap();
    let audit = audit_texts(&api).await;
    for action in [
        "billing_token_created",
        "billing_token_rotated",
        "invitation_reissued",
    ] {
        assert!(
            audit
                .iter()
                .any(|a| a.starts_with(action) && a.contains("operator command")),
            "{action}: {audit:#?}"
        );
    }
}

/// The console's housekeeping forgets the limiter's keys quiet for a day and the challenges
/// expired a day ago, and keeps the rest.
#[tokio::test]
async fn housekeeping_forgets_quiet_limiter_keys_and_old_challenges() {
    let api = Api::start().await;
    let p = api.owner("100").await;
    let (_, created) = api.create(&p, "housekeeping", 1.0, 1.0).await;
    let url = created["data"]["activation"]["invite_url"]
        .as_str()
        .unwrap();
    let token = url.rsplit('/').next().unwrap();
    let start = chrono::Utc::now();
    api.state.clock.set(Some(start));
    let (s, _, v, _) = api
        .call(
            Method::POST,
            None,
            &format!("/invitations/{token}/accept"),
            Some(&json!({"email": "owner@housekeeping.example", "password": super::console::PASSWORD})),
            None,
        )
        .await;
    assert_eq!(s, 202, "{v}");
    admin_api::workers::forget::round(&api.state).await;
    assert_eq!(
        api.count("console_throttles").await,
        2,
        "address and network kept"
    );
    assert_eq!(api.count("console_challenges").await, 1);
    api.state.clock.set(Some(
        start + chrono::Duration::days(1) + chrono::Duration::hours(1),
    ));
    admin_api::workers::forget::round(&api.state).await;
    assert_eq!(api.count("console_throttles").await, 0);
    assert_eq!(api.count("console_challenges").await, 0);
    api.state.clock.set(None);
}
