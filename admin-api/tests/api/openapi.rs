//! The OpenAPI document: every route and every served field is documented.

use super::*;

/// The properties and required names of a schema, merged through `allOf` parts and `$ref`s.
fn schema_fields(doc: &Value, schema: &Value) -> (serde_json::Map<String, Value>, Vec<String>) {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap();
        return schema_fields(doc, &doc["components"]["schemas"][name]);
    }
    let mut props = schema["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut required: Vec<String> = schema["required"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    for part in schema["allOf"].as_array().into_iter().flatten() {
        let (p, r) = schema_fields(doc, part);
        props.extend(p);
        required.extend(r);
    }
    (props, required)
}

/// Every property of `value` is documented in schema `name` and every required documented
/// property is present, recursively through `$ref`s, arrays and `allOf` compositions (a DTO that
/// flattens another).
fn assert_documented(doc: &Value, name: &str, value: &Value) {
    let schema = &doc["components"]["schemas"][name];
    assert!(schema.is_object(), "schema {name} missing");
    let (props, required) = schema_fields(doc, schema);
    assert!(!props.is_empty(), "{name} has no properties");
    let props = &props;
    let obj = value
        .as_object()
        .unwrap_or_else(|| panic!("{name}: not an object: {value}"));
    for key in obj.keys() {
        assert!(
            props.contains_key(key),
            "{name}: served field {key:?} is not documented"
        );
    }
    for key in &required {
        assert!(
            obj.contains_key(key.as_str()),
            "{name}: documented required field {key:?} is not served"
        );
    }
    for (key, prop) in props {
        let Some(v) = obj.get(key) else { continue };
        let reference = prop["$ref"]
            .as_str()
            .or_else(|| prop["oneOf"][0]["$ref"].as_str());
        if let Some(r) = reference {
            assert_documented(doc, r.rsplit('/').next().unwrap(), v);
        } else if let (Some(r), Some(items)) = (prop["items"]["$ref"].as_str(), v.as_array()) {
            for item in items {
                assert_documented(doc, r.rsplit('/').next().unwrap(), item);
            }
        }
    }
}

#[tokio::test]
async fn openapi_documents_every_route_and_field() {
    let api = Api::start().await;
    let (s, _, doc, _) = api
        .call(Method::GET, None, "/partner/v1/openapi.json", None, None)
        .await;
    assert_eq!(s, 200);
    let mut documented: Vec<String> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, ops)| {
            ops.as_object()
                .unwrap()
                .keys()
                .map(move |m| format!("{} {path}", m.to_uppercase()))
        })
        .collect();
    documented.sort();
    let mut expected: Vec<String> = [
        "GET /partner/v1/me",
        "GET /partner/v1/funding",
        "POST /partner/v1/funding/top-up-sessions",
        "PUT /partner/v1/customers/by-external-id/{external_customer_id}",
        "GET /partner/v1/customers/by-external-id/{external_customer_id}",
        "GET /partner/v1/customers/{customer_id}",
        "GET /partner/v1/customers/{customer_id}/balance",
        "POST /partner/v1/customers/{customer_id}/allocations",
        "GET /partner/v1/customers/{customer_id}/groups",
        "PUT /partner/v1/customers/{customer_id}/groups/{group_id}/rate",
        "GET /partner/v1/customers/{customer_id}/api-keys",
        "POST /partner/v1/customers/{customer_id}/api-keys",
        "DELETE /partner/v1/customers/{customer_id}/api-keys/{api_key_id}",
        "GET /partner/v1/customers/{customer_id}/usage",
        "GET /partner/v1/customers/{customer_id}/api-keys/{api_key_id}/usage",
        "GET /api/v1/organization/billing/balance",
        "GET /api/v1/organization/billing/usage/daily",
        "GET /compat/v1/key",
        "GET /compat/v1/generations/{request_id}",
        "POST /compat/v1/files",
        "GET /compat/v1/files/{file_id}",
        "GET /compat/v1/files/{file_id}/content",
        "POST /compat/v1/batches",
        "GET /compat/v1/batches",
        "GET /compat/v1/batches/{batch_id}",
        "POST /compat/v1/batches/{batch_id}/cancel",
        "POST /v1/messages/batches",
        "GET /v1/messages/batches",
        "GET /v1/messages/batches/{message_batch_id}",
        "GET /v1/messages/batches/{message_batch_id}/results",
        "POST /v1/messages/batches/{message_batch_id}/cancel",
        "GET /api/v1/organization/billing/statements/{month}",
        "GET /partner/v1/funding/low-balance-alert",
        "PUT /partner/v1/funding/low-balance-alert",
        "GET /partner/v1/customers/{customer_id}/low-balance-alert",
        "PUT /partner/v1/customers/{customer_id}/low-balance-alert",
        "GET /partner/v1/customers/{customer_id}/automatic-allocation",
        "PUT /partner/v1/customers/{customer_id}/automatic-allocation",
        "DELETE /partner/v1/customers/{customer_id}/automatic-allocation",
        "GET /partner/v1/funding/recharge",
        "PUT /partner/v1/funding/recharge",
        "DELETE /partner/v1/funding/recharge",
        "POST /partner/v1/funding/recharge/card-sessions",
        "POST /partner/v1/webhooks",
        "GET /partner/v1/webhooks",
        "GET /partner/v1/webhooks/{webhook_id}",
        "PATCH /partner/v1/webhooks/{webhook_id}",
        "DELETE /partner/v1/webhooks/{webhook_id}",
        "GET /partner/v1/webhooks/{webhook_id}/deliveries",
        "POST /partner/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    expected.sort();
    assert_eq!(documented, expected);
    assert!(doc["components"]["securitySchemes"]["partner_token"].is_object());

    // Served responses match their schemas.
    let owner = api.owner("100").await;
    let (_, me) = api.get(&owner, "/me").await;
    assert_documented(&doc, "PartnerIdentity", &me["data"]);
    assert_documented(&doc, "Funding", &api.funding(&owner).await);
    let (_, created) = api.create(&owner, "doc", 10.0, 1.0).await;
    assert_documented(&doc, "CustomerData", &created["data"]);
    let (id, org) = api.active_customer(&owner, "doc2", 10.0, 1.0).await;
    let (_, read) = api.get(&owner, &format!("/customers/{id}")).await;
    assert_documented(&doc, "CustomerData", &read["data"]);
    let (_, balance) = api.get(&owner, &format!("/customers/{id}/balance")).await;
    assert_documented(&doc, "CustomerBalance", &balance["data"]);
    let (_, groups) = api.get(&owner, &format!("/customers/{id}/groups")).await;
    assert_documented(&doc, "Group", &groups["data"][0]);
    let (_, key) = api
        .write(
            &owner,
            Method::POST,
            &format!("/customers/{id}/api-keys"),
            Some(&json!({"name": "k", "group_id": 1, "budget_usd": 3})),
        )
        .await;
    assert!(key["data"]["budget"].is_object(), "{key}");
    assert_documented(&doc, "KeyPreview", &key["data"]);
    let standing: Value = api
        .http
        .get(format!("{}/compat/v1/key", api.base))
        .bearer_auth(key["data"]["key"].as_str().unwrap())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_documented(&doc, "KeyStanding", &standing["data"]);
    let (_, usage) = api.get(&owner, &format!("/customers/{id}/usage")).await;
    assert_documented(&doc, "UsageBuckets", &usage["data"]);
    let (_, top_up) = api
        .write(
            &owner,
            Method::POST,
            "/funding/top-up-sessions",
            Some(&json!({"amount_usd": 3})),
        )
        .await;
    assert_documented(&doc, "TopUpSession", &top_up["data"]);
    let (_, err) = api.get(&owner, "/customers/999").await;
    assert_documented(&doc, "ErrorEnvelope", &err);
    let token = api.billing_token(org).await;
    for (path, schema) in [
        ("balance", "OrganizationBalance"),
        ("usage/daily", "DailyUsage"),
    ] {
        let v: Value = api
            .http
            .get(format!("{}/api/v1/organization/billing/{path}", api.base))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_documented(&doc, schema, &v["data"]);
    }
}
