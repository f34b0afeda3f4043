//! `GET {compat_base}/key` (DESIGN §6d): a customer key reads its own standing and its
//! organization's reconciled balance, nothing about other keys; refusals as the gateway's, and 503
//! in the billing envelope when the balance is not reconciled (never a zero).

use super::*;

async fn standing(api: &Api, headers: &[(&str, &str)]) -> (StatusCode, Value) {
    let mut req = api.http.get(format!("{}/compat/v1/key", api.base));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap())
}

#[tokio::test]
async fn a_key_reads_its_own_standing() {
    standing_on(Api::start().await).await;
    if let Some(url) = testkit::redis_url() {
        let stores = Stores::redis(&url, &testkit::redis_prefix("standing"))
            .await
            .unwrap();
        standing_on(Api::start_on("", stores).await).await;
    }
}

async fn standing_on(api: Api) {
    let owner = api.owner("100").await;
    let (id, org) = api.active_customer(&owner, "standing", 10.0, 1.0).await;
    let path = format!("/customers/{id}/api-keys");
    let (_, capped) = api
        .write(
            &owner,
            Method::POST,
            &path,
            Some(&json!({"name": "capped", "group_id": 1, "budget_usd": 2,
                "budget_period": "day", "max_concurrency": 3})),
        )
        .await;
    let (_, other) = api
        .write(
            &owner,
            Method::POST,
            &path,
            Some(&json!({"name": "other", "group_id": 1})),
        )
        .await;
    let secret = capped["data"]["key"].as_str().unwrap().to_string();
    let bearer = format!("Bearer {secret}");

    let (s, v) = standing(&api, &[("authorization", &bearer)]).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["code"], 0);
    let d = &v["data"];
    assert_eq!(d["api_key_id"], capped["data"]["api_key_id"]);
    assert_eq!(d["name"], "capped");
    assert_eq!(d["preview"], capped["data"]["preview"]);
    assert_eq!(d["group_id"], 1);
    assert_eq!(d["limits"]["max_concurrency"], 3);
    assert_eq!(d["budget"]["budget_usd"], 2);
    assert_eq!(d["budget"]["remaining_usd"], 2);
    assert_eq!(
        d["spend"],
        json!({"day_usd": 0, "month_usd": 0, "held_usd": 0})
    );
    assert_eq!(d["organization"]["organization_id"], org);
    assert_eq!(d["organization"]["available_usd"], 10);
    assert_eq!(d["organization"]["status"], "reconciled");
    // Nothing about any other key: no secret, no other key's id or name anywhere.
    let text = v.to_string();
    assert!(!text.contains(&secret), "{text}");
    assert!(!text.contains("\"other\""), "{text}");
    let mut fields: Vec<&str> = d.as_object().unwrap().keys().map(String::as_str).collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "api_key_id",
            "budget",
            "expires_at",
            "group_id",
            "group_name",
            "limits",
            "name",
            "organization",
            "preview",
            "spend"
        ],
        "one key's fields, no list of keys"
    );
    // The same through x-api-key; a key without a budget shows none.
    let (s, v) = standing(
        &api,
        &[("x-api-key", other["data"]["key"].as_str().unwrap())],
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["data"]["name"], "other");
    assert_eq!(v["data"]["budget"], Value::Null);

    // Refusals are the gateway's: no key, a malformed or unknown key, two different keys.
    let (s, v) = standing(&api, &[]).await;
    assert_eq!(s, 401);
    assert_eq!(v["error"], "missing_api_key", "{v}");
    let unknown = credentials::generate(credentials::Kind::CustomerKey, credentials::Env::Dev);
    for headers in [
        vec![("authorization", "Bearer not-a-key".to_string())],
        vec![("authorization", format!("Bearer {}", unknown.expose()))],
        vec![
            ("authorization", bearer.clone()),
            (
                "x-api-key",
                other["data"]["key"].as_str().unwrap().to_string(),
            ),
        ],
    ] {
        let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (s, v) = standing(&api, &h).await;
        assert_eq!(s, 401, "{headers:?}");
        assert_eq!(v["error"]["type"], "authentication_error", "{v}");
    }

    // A mirror that disagrees with the ledger: 503 in the billing envelope, never a figure.
    api.state
        .stores
        .wallets
        .adjust(org, nano(1), "drift-for-test")
        .await
        .unwrap();
    let (s, v) = standing(&api, &[("authorization", &bearer)]).await;
    assert_eq!(s, 503, "{v}");
    assert_eq!(v["reason"], "ORG_BALANCE_RECONCILIATION_REQUIRED", "{v}");
    assert!(v.get("data").is_none(), "{v}");
    admin_api::services::wallets::reload(&api.state, org)
        .await
        .unwrap();
    assert_eq!(standing(&api, &[("authorization", &bearer)]).await.0, 200);

    // A disabled key reads nothing.
    let key_id = capped["data"]["api_key_id"].as_i64().unwrap();
    let (s, _) = api
        .write(&owner, Method::DELETE, &format!("{path}/{key_id}"), None)
        .await;
    assert_eq!(s, 200);
    let (s, v) = standing(&api, &[("authorization", &bearer)]).await;
    assert_eq!(s, 401, "{v}");
}
