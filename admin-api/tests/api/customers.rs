//! Customers: creation's validation and business errors (each creating nothing), and the lifecycle
//! from pending activation to active.

use super::*;

#[tokio::test]
async fn create_customer_validation_errors_create_nothing() {
    let api = Api::start().await;
    let owner = api
        .partner("owner", &["partner:write"], "1000", "1.1")
        .await;
    let good = json!({"name": "Globex", "contact_email": "ann@globex.example", "initial_allocation_usd": 10, "retail_rate_multiplier": 1.5});
    let with = |k: &str, v: Value| {
        let mut b = good.clone();
        if v.is_null() {
            b.as_object_mut().unwrap().remove(k);
        } else {
            b[k] = v;
        }
        b
    };
    let long = "x".repeat(129);
    for external in ["a%2Fb", "sp%20ace", long.as_str(), "caf%C3%A9", "a..b%2F"] {
        let (s, v) = api
            .write(
                &owner,
                Method::PUT,
                &format!("/customers/by-external-id/{external}"),
                Some(&good),
            )
            .await;
        assert_error(s, &v, 400, "INVALID_PARTNER_EXTERNAL_CUSTOMER_ID");
    }
    let cases: Vec<(Value, &str)> = vec![
        (with("name", Value::Null), "INVALID_PARTNER_CUSTOMER"),
        (with("name", json!("!!!")), "INVALID_PARTNER_CUSTOMER"),
        (with("status", json!("active")), "INVALID_PARTNER_CUSTOMER"),
        (
            with("contact_email", json!("not-an-email")),
            "INVALID_PARTNER_CUSTOMER_CONTACT",
        ),
        (
            with("contact_email", Value::Null),
            "INVALID_PARTNER_CUSTOMER_CONTACT",
        ),
        (
            with("initial_allocation_usd", json!(-0.01)),
            "INVALID_PARTNER_INITIAL_ALLOCATION",
        ),
        (
            with("initial_allocation_usd", json!("10")),
            "INVALID_PARTNER_INITIAL_ALLOCATION",
        ),
        (
            with("retail_rate_multiplier", Value::Null),
            "INVALID_PARTNER_RETAIL_RATE",
        ),
        (
            with("retail_rate_multiplier", json!(0)),
            "INVALID_PARTNER_RETAIL_RATE",
        ),
        (
            with("retail_rate_multiplier", json!(-1)),
            "INVALID_PARTNER_RETAIL_RATE",
        ),
        (
            with("retail_rate_multiplier", json!("1.5")),
            "INVALID_PARTNER_RETAIL_RATE",
        ),
        (
            with("retail_rate_multiplier", json!(1.05)),
            "PARTNER_RETAIL_RATE_BELOW_FLOOR",
        ),
    ];
    for (body, reason) in cases {
        let (s, v) = api
            .write(
                &owner,
                Method::PUT,
                "/customers/by-external-id/ok-id",
                Some(&body),
            )
            .await;
        assert_error(s, &v, 400, reason);
        if reason == "PARTNER_RETAIL_RATE_BELOW_FLOOR" {
            assert_eq!(v["metadata"]["retail_floor_rate_multiplier"], 1.1);
        }
    }
    let ok_id = "A-z_0.9:".to_string() + &"x".repeat(120);
    assert_eq!(ok_id.len(), 128);
    let f = api.funding(&owner).await;
    assert_eq!(f["available_funding_usd"], 1000);
    assert_eq!(f["reserved_allocations_usd"], 0);
    assert_eq!(api.count("customers").await, 0);
    assert_eq!(api.count("organizations").await, 0);
    assert!(
        std::fs::read_dir(&api.outbox)
            .map(|d| d.count())
            .unwrap_or(0)
            == 0,
        "no email was sent"
    );
    let (s, v) = api
        .write(
            &owner,
            Method::PUT,
            &format!("/customers/by-external-id/{ok_id}"),
            Some(&good),
        )
        .await;
    assert_eq!(
        s, 200,
        "a 128-character id of the allowed characters is fine: {v}"
    );
}

#[tokio::test]
async fn create_customer_business_errors() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    // 200 USD at retail 1.0 over wholesale max 0.9 reserves 180 > 100.
    let (s, v) = api.create(&owner, "big", 200.0, 1.0).await;
    assert_error(s, &v, 403, "PARTNER_FUNDING_INSUFFICIENT");
    assert_eq!(
        v["metadata"],
        json!({"available_funding_usd": 100, "required_usd": 180, "shortfall_usd": 80, "next_action": "top_up_partner_balance"})
    );
    assert_eq!(api.count("customers").await, 0);
    assert_eq!(api.funding(&owner).await["available_funding_usd"], 100);
    // Never for an unfunded customer, even without funding.
    let broke = api.owner("0").await;
    let (s, v) = api.create(&broke, "free", 0.0, 1.0).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["data"]["created"], true);
    // The same external id again: the existing customer, created false, no invite_url, no email.
    let mails = std::fs::read_dir(&api.outbox).unwrap().count();
    let (s, again) = api.create(&broke, "free", 0.0, 1.0).await;
    assert_eq!(s, 200);
    assert_eq!(again["data"]["created"], false);
    assert!(again["data"]["activation"].get("invite_url").is_none());
    assert_eq!(std::fs::read_dir(&api.outbox).unwrap().count(), mails);
    // The same external id for a different contact: conflict.
    let (s, v) = api
        .write(&broke, Method::PUT, "/customers/by-external-id/free", Some(&json!({"name": "Other", "contact_email": "x@other.example", "initial_allocation_usd": 0, "retail_rate_multiplier": 1.0})))
        .await;
    assert_error(s, &v, 409, "PARTNER_EXTERNAL_CUSTOMER_CONFLICT");
    // A taken slug (organization slugs are global).
    let (s, v) = api
        .write(&owner, Method::PUT, "/customers/by-external-id/other", Some(&json!({"name": "Org free", "contact_email": "y@y.example", "initial_allocation_usd": 0, "retail_rate_multiplier": 1.0})))
        .await;
    assert_error(s, &v, 409, "PARTNER_CUSTOMER_SLUG_EXISTS");
    assert_eq!(api.count("customers").await, 1);
}

#[tokio::test]
async fn lifecycle_pending_then_active() {
    let api = Api::start().await;
    let owner = api.owner("1000").await;
    let (s, created) = api.create(&owner, "acme-1", 100.0, 1.25).await;
    assert_eq!(s, 200, "{created}");
    let d = &created["data"];
    assert_eq!(d["created"], true);
    assert_eq!(d["status"], "pending_activation");
    assert_eq!(d["external_customer_id"], "acme-1");
    assert_eq!(d["customer"]["organization_slug"], "org-acme-1");
    assert_eq!(d["customer"]["partner_allocation_cap_usd"], 100);
    assert_eq!(d["activation"]["invitation_status"], "pending");
    assert!(d["activation_hint"].is_string());
    let invite = d["activation"]["invite_url"].as_str().unwrap();
    assert!(
        invite.starts_with("https://gw.example.test/invitations/"),
        "{invite}"
    );
    // 100 × 0.9 / 1.25 = 72 reserved.
    let f = api.funding(&owner).await;
    assert_eq!(
        (
            f["available_funding_usd"].clone(),
            f["reserved_allocations_usd"].clone()
        ),
        (json!(928), json!(72))
    );
    // The invitation email went out with the link.
    let mail: String = std::fs::read_dir(&api.outbox)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    let unfolded = mail.replace("=\r\n", "").replace("=\n", "");
    assert!(
        unfolded.contains(invite),
        "the email carries the invite link"
    );
    let id = d["customer"]["id"].as_i64().unwrap();

    // Pending: every route that needs an active customer answers 409 with the spec's metadata.
    for (method, path, body) in [
        (Method::GET, format!("/customers/{id}/balance"), None),
        (
            Method::POST,
            format!("/customers/{id}/allocations"),
            Some(json!({"action": "increase", "amount_usd": 1})),
        ),
        (Method::GET, format!("/customers/{id}/groups"), None),
        (
            Method::PUT,
            format!("/customers/{id}/groups/1/rate"),
            Some(json!({"retail_rate_multiplier": 2})),
        ),
        (
            Method::POST,
            format!("/customers/{id}/api-keys"),
            Some(json!({"name": "k", "group_id": 1})),
        ),
        (Method::GET, format!("/customers/{id}/usage"), None),
    ] {
        let (s, v) = if method == Method::GET {
            api.get(&owner, &path).await
        } else {
            api.write(&owner, method, &path, body.as_ref()).await
        };
        assert_error(s, &v, 409, "PARTNER_CUSTOMER_PENDING_ACTIVATION");
        assert_eq!(v["metadata"]["invited_email"], "owner@acme-1.example");
        assert_eq!(v["metadata"]["invitation_status"], "pending");
        assert_eq!(
            v["metadata"]["invitation_expires_at"],
            d["activation"]["invitation_expires_at"]
        );
        assert_eq!(v["metadata"]["next_action"], "accept_invitation");
    }
    // Reads by id and external id omit created and invite_url.
    for path in [
        format!("/customers/{id}"),
        "/customers/by-external-id/acme-1".to_string(),
    ] {
        let (s, v) = api.get(&owner, &path).await;
        assert_eq!(s, 200);
        assert!(v["data"].get("created").is_none());
        assert!(v["data"]["activation"].get("invite_url").is_none());
    }
    // The invitation page, a wrong email, then the right one.
    let token = invite.rsplit('/').next().unwrap();
    let (s, _, _, html) = api
        .call(
            Method::GET,
            None,
            &format!("/invitations/{token}"),
            None,
            None,
        )
        .await;
    assert_eq!(s, 200);
    assert!(html.contains("<form") && html.contains("Org acme-1"));
    let (s, _, v, _) = api
        .call(
            Method::POST,
            None,
            &format!("/invitations/{token}/accept"),
            Some(&json!({"email": "eve@evil.example"})),
            None,
        )
        .await;
    assert_eq!(s, 403, "{v}");
    // The address alone never activates (DESIGN §6c): the form asks for a password.
    let resp = api
        .http
        .post(format!("{}/invitations/{token}/accept", api.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("email=Owner%40acme-1.example")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let (_, v) = api.get(&owner, &format!("/customers/{id}")).await;
    assert_eq!(v["data"]["status"], "pending_activation");
    let (s, v) = api.accept_invitation(token, "Owner@acme-1.example").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["data"]["status"], "active");
    let (s, _, _, _) = api
        .call(
            Method::POST,
            None,
            &format!("/invitations/{token}/accept"),
            Some(&json!({"email": "owner@acme-1.example", "password": console::PASSWORD})),
            None,
        )
        .await;
    assert_eq!(s, 409, "accepting twice is refused");

    let (s, v) = api.get(&owner, &format!("/customers/{id}/balance")).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["data"]["organization_balance_usd"], 100,
        "the balance opens with the allocation"
    );
    let (_, v) = api.get(&owner, &format!("/customers/{id}")).await;
    assert_eq!(v["data"]["status"], "active");
    assert_eq!(v["data"]["activation"]["invitation_status"], "accepted");
}

/// A body nested deeper than JSON parsers allow (128 levels) is refused with the route's reason,
/// and nothing is created or stored under the idempotency key.
#[tokio::test]
async fn deeply_nested_bodies_are_refused_with_the_route_reason() {
    use sea_orm::EntityTrait;
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let deep = format!(
        r#"{{"name":"Deep","contact_email":"d@example.com","initial_allocation_usd":1,"retail_rate_multiplier":1,"x":{}{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    for (path, reason) in [
        ("/customers/by-external-id/deep", "INVALID_PARTNER_CUSTOMER"),
        ("/funding/top-up-sessions", "INVALID_PARTNER_TOP_UP_AMOUNT"),
    ] {
        let method = if path.starts_with("/customers") {
            Method::PUT
        } else {
            Method::POST
        };
        let resp = api
            .http
            .request(method, format!("{}/partner/v1{path}", api.base))
            .bearer_auth(&owner.token)
            .header("idempotency-key", "deep-1")
            .header("content-type", "application/json")
            .body(deep.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{path}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["reason"], reason, "{path}: {body}");
        assert_eq!(body["code"], 400);
    }
    let (status, _) = api.get(&owner, "/customers/by-external-id/deep").await;
    assert_eq!(status, 404, "nothing was created");
    assert_eq!(
        entities::idempotency_records::Entity::find()
            .all(&api.state.db)
            .await
            .unwrap()
            .len(),
        0,
        "nothing was stored under the key"
    );
}

/// Path and text edge cases answer the route's envelope the same way on every database: an
/// external id that is not UTF-8, the dot segments `.` and `..` (clients remove them, so such a
/// customer could never be addressed), and a NUL inside a name (PostgreSQL cannot store it).
#[tokio::test]
async fn partner_edge_cases_get_the_routes_reasons() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let body = json!({"name": "Acme", "contact_email": "a@acme.example", "initial_allocation_usd": 0, "retail_rate_multiplier": 1});
    // Raw paths (reqwest would normalize dot segments).
    for (n, path) in ["%ff%fe", ".", "..", "%2e", "%2E%2e"]
        .into_iter()
        .enumerate()
    {
        let target = format!("/partner/v1/customers/by-external-id/{path}");
        for method in ["PUT", "GET"] {
            let (status, headers, body) = raw_call(
                &api,
                method,
                &target,
                &owner.token,
                &format!("edge-{n}"),
                &body.to_string(),
            )
            .await;
            assert_eq!(status, 400, "{method} {path}: {body}");
            assert!(
                headers.contains("application/json"),
                "{method} {path}: {headers}"
            );
            let v: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(
                v["reason"], "INVALID_PARTNER_EXTERNAL_CUSTOMER_ID",
                "{method} {path}"
            );
        }
    }
    // A non-UTF-8 customer id is an unknown customer.
    let (status, _, body) = raw_call(
        &api,
        "GET",
        "/partner/v1/customers/%ff/balance",
        &owner.token,
        "x",
        "",
    )
    .await;
    assert_eq!(status, 404, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["reason"], "PARTNER_CUSTOMER_NOT_FOUND");
    // A NUL in a name: 400 with the route's reason, on SQLite and PostgreSQL alike.
    let (status, v) = api
        .write(
            &owner,
            Method::PUT,
            "/customers/by-external-id/nul",
            Some(&json!({"name": "Acme\u{0}Corp", "contact_email": "a@nul.example", "initial_allocation_usd": 0, "retail_rate_multiplier": 1})),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["reason"], "INVALID_PARTNER_CUSTOMER");
    let (id, _) = api.active_customer(&owner, "nulkey", 1.0, 1.0).await;
    let (status, v) = api
        .write(
            &owner,
            Method::POST,
            &format!("/customers/{id}/api-keys"),
            Some(&json!({"name": "k\u{0}1", "group_id": 1})),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["reason"], "INVALID_PARTNER_CUSTOMER_API_KEY");
    let (_, keys) = api.get(&owner, &format!("/customers/{id}/api-keys")).await;
    assert_eq!(
        keys["data"].as_array().unwrap().len(),
        0,
        "no key was created"
    );
}

/// One request on a raw connection (the path exactly as given): status, headers as text, body.
async fn raw_call(
    api: &Api,
    method: &str,
    path: &str,
    token: &str,
    idem: &str,
    body: &str,
) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = api.base.trim_start_matches("http://");
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\nidempotency-key: {idem}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    sock.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    sock.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body.split("\r\n").nth(1).unwrap_or_default().to_string()
    } else {
        body.to_string()
    };
    (status, head.to_ascii_lowercase(), body)
}

/// A required path id that is empty reaches its route and gets the route's refusal in the
/// partner envelope, never the plain-text 404 of a path that does not exist; the listing paths
/// SPEC names as absent stay absent. Nothing is created.
#[tokio::test]
async fn empty_path_ids_get_the_routes_reasons() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (id, _) = api.active_customer(&owner, "emptyids", 1.0, 1.0).await;
    let body = json!({"name": "Acme", "contact_email": "a@acme.example", "initial_allocation_usd": 0, "retail_rate_multiplier": 1});
    let cases: Vec<(&str, String, u16, &str)> = vec![
        (
            "PUT",
            "/partner/v1/customers/by-external-id/".into(),
            400,
            "INVALID_PARTNER_EXTERNAL_CUSTOMER_ID",
        ),
        (
            "GET",
            "/partner/v1/customers/by-external-id/".into(),
            400,
            "INVALID_PARTNER_EXTERNAL_CUSTOMER_ID",
        ),
        (
            "GET",
            "/partner/v1/customers//balance".into(),
            404,
            "PARTNER_CUSTOMER_NOT_FOUND",
        ),
        (
            "GET",
            "/partner/v1/customers//groups".into(),
            404,
            "PARTNER_CUSTOMER_NOT_FOUND",
        ),
        (
            "GET",
            "/partner/v1/customers//api-keys".into(),
            404,
            "PARTNER_CUSTOMER_NOT_FOUND",
        ),
        (
            "GET",
            "/partner/v1/customers//usage?granularity=day".into(),
            404,
            "PARTNER_CUSTOMER_NOT_FOUND",
        ),
        (
            "PUT",
            format!("/partner/v1/customers/{id}/groups//rate"),
            404,
            "PARTNER_CUSTOMER_GROUP_NOT_FOUND",
        ),
        (
            "DELETE",
            format!("/partner/v1/customers/{id}/api-keys/"),
            400,
            "INVALID_PARTNER_CUSTOMER_API_KEY",
        ),
        (
            "GET",
            format!("/partner/v1/customers/{id}/api-keys//usage"),
            400,
            "INVALID_PARTNER_CUSTOMER_API_KEY",
        ),
    ];
    for (n, (method, path, status, reason)) in cases.into_iter().enumerate() {
        let payload = if path.ends_with("/rate") {
            json!({"retail_rate_multiplier": 1.5}).to_string()
        } else if method == "PUT" {
            body.to_string()
        } else {
            String::new()
        };
        let (s, headers, text) = raw_call(
            &api,
            method,
            &path,
            &owner.token,
            &format!("empty-{n}"),
            &payload,
        )
        .await;
        assert_eq!(s, status, "{method} {path}: {text}");
        assert!(
            headers.contains("application/json"),
            "{method} {path}: {headers}"
        );
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["reason"], reason, "{method} {path}");
        assert_eq!(v["code"], status);
        assert!(v["metadata"].is_object(), "{v}");
    }
    // Authentication still comes first.
    let (s, _, text) = raw_call(
        &api,
        "GET",
        "/partner/v1/customers/by-external-id/",
        "tgp_wrong",
        "x",
        "",
    )
    .await;
    assert_eq!(s, 401, "{text}");
    // Paths that do not exist stay plain text.
    for path in [
        "/partner/v1/customers",
        "/partner/v1/customers/",
        "/partner/v1/balance",
    ] {
        let (s, headers, text) = raw_call(&api, "GET", path, &owner.token, "x", "").await;
        assert_eq!((s, text.as_str()), (404, "page not found"), "{path}");
        assert!(headers.contains("text/plain"), "{path}");
    }
    assert_eq!(api.count("customers").await, 1, "nothing was created");
}

/// `slug` and `billing_email` on create are stored and returned (on the create answer and on
/// every read); without them the slug derives from the name and the billing email is null; a
/// bad billing email or slug is refused and creates nothing. The group-rate route answers 404
/// PARTNER_CUSTOMER_NOT_FOUND for an unknown customer (and another partner's).
#[tokio::test]
async fn slug_and_billing_email_are_stored_and_returned() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let body = json!({"name": "Initech Ltd", "slug": "initech-eu", "contact_email": "pm@initech.example",
                      "billing_email": "Billing@Initech.example", "initial_allocation_usd": 0, "retail_rate_multiplier": 1});
    let (s, v) = api
        .write(
            &owner,
            Method::PUT,
            "/customers/by-external-id/initech",
            Some(&body),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let check = |v: &Value| {
        assert_eq!(
            v["data"]["customer"]["organization_slug"], "initech-eu",
            "{v}"
        );
        assert_eq!(
            v["data"]["customer"]["billing_email"], "billing@initech.example",
            "{v}"
        );
        assert_eq!(v["data"]["customer"]["email"], "pm@initech.example");
    };
    check(&v);
    let id = v["data"]["customer"]["id"].as_i64().unwrap();
    check(&api.get(&owner, &format!("/customers/{id}")).await.1);
    check(&api.get(&owner, "/customers/by-external-id/initech").await.1);
    // Without them: derived slug, null billing email.
    let plain = json!({"name": "Umbrella Corp", "contact_email": "a@umbrella.example", "initial_allocation_usd": 0, "retail_rate_multiplier": 1});
    let (s, v) = api
        .write(
            &owner,
            Method::PUT,
            "/customers/by-external-id/umbrella",
            Some(&plain),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["data"]["customer"]["organization_slug"], "umbrella-corp");
    assert!(v["data"]["customer"]["billing_email"].is_null(), "{v}");
    // The slug is taken now; a bad billing email or slug creates nothing.
    let mut taken = plain.clone();
    taken["slug"] = json!("initech-eu");
    let (s, v) = api
        .write(
            &owner,
            Method::PUT,
            "/customers/by-external-id/other",
            Some(&taken),
        )
        .await;
    assert_error(s, &v, 409, "PARTNER_CUSTOMER_SLUG_EXISTS");
    for (field, bad, reason) in [
        (
            "billing_email",
            json!("not-an-email"),
            "INVALID_PARTNER_CUSTOMER_CONTACT",
        ),
        (
            "billing_email",
            json!(5),
            "INVALID_PARTNER_CUSTOMER_CONTACT",
        ),
        ("slug", json!("Bad Slug"), "INVALID_PARTNER_CUSTOMER"),
    ] {
        let mut b = plain.clone();
        b[field] = bad;
        let (s, v) = api
            .write(
                &owner,
                Method::PUT,
                "/customers/by-external-id/bad",
                Some(&b),
            )
            .await;
        assert_error(s, &v, 400, reason);
    }
    assert_eq!(api.count("customers").await, 2, "nothing else was created");
    // The group-rate route: unknown customer, another partner's customer.
    let (s, v) = api
        .write(
            &owner,
            Method::PUT,
            "/customers/999999/groups/1/rate",
            Some(&json!({"retail_rate_multiplier": 1.5})),
        )
        .await;
    assert_error(s, &v, 404, "PARTNER_CUSTOMER_NOT_FOUND");
    let stranger = api.partner("owner", &["partner:write"], "100", "1.0").await;
    let (s, v) = api
        .write(
            &stranger,
            Method::PUT,
            &format!("/customers/{id}/groups/1/rate"),
            Some(&json!({"retail_rate_multiplier": 1.5})),
        )
        .await;
    assert_error(s, &v, 404, "PARTNER_CUSTOMER_NOT_FOUND");
}
