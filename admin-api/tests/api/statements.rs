//! Monthly statements (issue 32): CSV and PDF from the billing API, whose figures equal the
//! ledger's to the nano-dollar; the PDF read back as text (`pdftotext`, Debian's poppler-utils).

use super::*;

/// The CSV's records of kind `kind`.
fn records<'a>(csv: &'a str, kind: &str) -> Vec<Vec<&'a str>> {
    csv.lines()
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|r| r.first() == Some(&kind))
        .collect()
}

/// A nine-decimal amount as nanos.
fn nanos(s: &str) -> i64 {
    let (whole, frac) = s.split_once('.').unwrap();
    let neg = whole.starts_with('-');
    let n = whole.trim_start_matches('-').parse::<i64>().unwrap() * 1_000_000_000
        + frac.parse::<i64>().unwrap();
    if neg { -n } else { n }
}

async fn get_statement(
    api: &Api,
    token: &str,
    month: &str,
    accept: Option<&str>,
) -> (u16, String, Vec<u8>) {
    let mut req = api
        .http
        .get(format!(
            "{}/api/v1/organization/billing/statements/{month}",
            api.base
        ))
        .bearer_auth(token);
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let ct = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, ct, resp.bytes().await.unwrap().to_vec())
}

/// `pdftotext` of `pdf`, or `None` when the tool is missing (a failure under
/// `TOLLGATE_REQUIRE_SERVICES=1`).
fn pdf_text(pdf: &[u8]) -> Option<String> {
    let dir = std::env::temp_dir().join(format!("tollgate-pdf-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("s.pdf");
    std::fs::write(&file, pdf).unwrap();
    let out = match std::process::Command::new("pdftotext")
        .arg("-layout")
        .arg(&file)
        .arg("-")
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            assert!(
                !testkit::services_required(),
                "pdftotext is missing (apt-get install poppler-utils): {e}"
            );
            eprintln!("pdftotext missing: the PDF's text is not checked");
            return None;
        }
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).ok();
    Some(String::from_utf8(out.stdout).unwrap())
}

#[tokio::test]
async fn a_months_statement_equals_the_ledger_in_csv_and_pdf() {
    statement_on(Api::start().await).await;
    if let Some(url) = testkit::redis_url() {
        let stores = Stores::redis(&url, &testkit::redis_prefix("statements"))
            .await
            .unwrap();
        statement_on(Api::start_on("", stores).await).await;
    }
}

async fn statement_on(api: Api) {
    use admin_api::ledger::{self, AccountRef};
    let owner = api.owner("100").await;
    let (id, org) = api.active_customer(&owner, "stated", 10.0, 1.0).await;
    let token = api.billing_token(org).await;
    // Last month: an allocation posted then (the opening balance of this month includes it).
    let now = chrono::Utc::now();
    let this = admin_api::services::statements::Month::of(now);
    let last = this.previous();
    ledger::transfer_at(
        &api.state.db,
        "test:last-month",
        "allocation",
        &AccountRef::partner_allocations(owner.id),
        &AccountRef::org_wallet(org),
        nano(2_500_000_001),
        last.start() + chrono::Duration::days(3),
    )
    .await
    .unwrap();
    admin_api::services::wallets::reload(&api.state, org)
        .await
        .unwrap();
    // This month: calls on two models, one of them a batch line (issue 46: its own line),
    // settled; an allocation decreased.
    for (i, (model, cost, batch)) in [
        ("gpt-4o-mini", 1_234_567, false),
        ("gpt-4o", 7_000_000_003, false),
        ("gpt-4o-mini", 5, false),
        ("gpt-4o-mini", 11, true),
    ]
    .into_iter()
    .enumerate()
    {
        let event = opstate::UsageEvent {
            model_served: model.into(),
            batch: batch.then(|| opstate::BatchRef {
                id: "batch_stated".into(),
                line: 3,
            }),
            ..super::settlement::settled_event(
                &format!("st-{i}"),
                org,
                model,
                u64::try_from(now.timestamp_millis()).unwrap(),
                cost,
                0,
            )
        };
        let asks = [opstate::SlotAsk {
            account: "a",
            max: 10,
        }];
        api.state
            .stores
            .calls
            .admit(
                &asks,
                &event.request_id,
                std::time::Duration::from_secs(30),
                opstate::Limits::default(),
                Some(opstate::HoldAsk {
                    org,
                    hold_id: &event.request_id,
                    amount: nano(cost),
                    ttl_ms: 60_000,
                    meta: "",
                    spend: None,
                }),
            )
            .await
            .unwrap();
        api.state
            .stores
            .calls
            .finish(opstate::Finish {
                slot: Some(("a", &event.request_id)),
                gates: &[],
                hold: Some((org, &event.request_id)),
                cost: nano(cost),
                event: Some(&event),
            })
            .await
            .unwrap();
    }
    admin_api::workers::settler::drain_once(&api.state, "t")
        .await
        .unwrap();
    let (s, _) = api
        .write(
            &owner,
            Method::POST,
            &format!("/customers/{id}/allocations"),
            Some(&json!({"action": "decrease", "amount_usd": 0.5})),
        )
        .await;
    assert_eq!(s, 200);

    // CSV by default and on request.
    let (s, ct, body) = get_statement(&api, &token, &this.to_string(), None).await;
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&body));
    assert!(ct.starts_with("text/csv"), "{ct}");
    let csv = String::from_utf8(body).unwrap();
    let (_, _, again) = get_statement(&api, &token, &this.to_string(), Some("text/csv")).await;
    assert_eq!(
        records(&String::from_utf8(again).unwrap(), "closing_balance_usd"),
        records(&csv, "closing_balance_usd")
    );
    let head = &records(&csv, "statement")[0];
    assert_eq!(
        head[1..6],
        [
            "organization",
            &org.to_string(),
            "Org stated",
            &this.to_string(),
            "provisional"
        ]
    );
    let opening = nanos(records(&csv, "opening_balance_usd")[0][1]);
    let movements: Vec<i64> = records(&csv, "movement")
        .iter()
        .skip(1)
        .map(|r| nanos(r[4]))
        .collect();
    let usage: Vec<Vec<&str>> = records(&csv, "usage").into_iter().skip(1).collect();
    let usage_total = nanos(records(&csv, "usage_total_usd")[0][1]);
    let posted = nanos(records(&csv, "usage_posted_usd")[0][1]);
    let closing = nanos(records(&csv, "closing_balance_usd")[0][1]);
    // The ledger, read directly.
    let book = ledger::balance(&api.state.db, &AccountRef::org_wallet(org).code)
        .await
        .unwrap()
        .nanos();
    assert_eq!(closing, book, "closing = the ledger's balance");
    assert_eq!(opening, 2_500_000_001, "opening: last month's allocation");
    assert_eq!(
        movements,
        vec![10_000_000_000, -500_000_000],
        "the activation's allocation, then the decrease: {csv}"
    );
    assert_eq!(usage_total, 1_234_567 + 7_000_000_003 + 5 + 11, "{csv}");
    assert_eq!(posted, usage_total, "usage = the ledger's spend postings");
    assert_eq!(opening + movements.iter().sum::<i64>() - posted, closing);
    assert_eq!(
        usage.len(),
        3,
        "one line per model, group and batch work: {csv}"
    );
    let mini = usage.iter().find(|r| r[1] == "gpt-4o-mini").unwrap();
    assert_eq!((mini[2], mini[3]), ("Standard", "2"), "{csv}");
    assert_eq!(nanos(mini[9]), 1_234_567 + 5);
    let batch = usage
        .iter()
        .find(|r| r[1] == "gpt-4o-mini (batch)")
        .unwrap();
    assert_eq!((batch[2], batch[3]), ("Standard", "1"), "{csv}");
    assert_eq!(nanos(batch[9]), 11, "batch spend apart: {csv}");

    // Last month: closed, opening zero, the one allocation, closing = this month's opening.
    let (_, _, body) = get_statement(&api, &token, &last.to_string(), None).await;
    let before = String::from_utf8(body).unwrap();
    assert_eq!(records(&before, "statement")[0][5], "closed");
    assert_eq!(nanos(records(&before, "opening_balance_usd")[0][1]), 0);
    assert_eq!(
        nanos(records(&before, "closing_balance_usd")[0][1]),
        2_500_000_001
    );

    // The PDF: the same figures, read back as text.
    let (s, ct, pdf) =
        get_statement(&api, &token, &this.to_string(), Some("application/pdf")).await;
    assert_eq!(s, 200);
    assert_eq!(ct, "application/pdf");
    assert!(pdf.starts_with(b"%PDF-"), "a PDF");
    if let Ok(path) = std::env::var("TOLLGATE_KEEP_STATEMENT") {
        std::fs::write(path, &pdf).unwrap();
    }
    assert!(
        pdf.windows(8).any(|w| w == b"FontFile"),
        "the font is embedded"
    );
    if let Some(text) = pdf_text(&pdf) {
        for figure in [
            records(&csv, "opening_balance_usd")[0][1],
            records(&csv, "closing_balance_usd")[0][1],
            records(&csv, "usage_total_usd")[0][1],
            "-0.500000000",
        ] {
            assert!(text.contains(figure), "{figure} in the PDF:\n{text}");
        }
        assert!(
            text.contains("PROVISIONAL") && text.contains("Org stated"),
            "{text}"
        );
        assert!(
            text.contains("gpt-4o-mini") && text.contains("gpt-4o "),
            "{text}"
        );
        assert!(text.contains("gpt-4o-mini (batch)"), "{text}");
    }

    // Refusals: a month in the future or malformed, a format not served, no token.
    for bad in [this.next().to_string(), "2026-13".into(), "26-11".into()] {
        let (s, _, body) = get_statement(&api, &token, &bad, None).await;
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_error(
            StatusCode::from_u16(s).unwrap(),
            &v,
            400,
            "INVALID_STATEMENT_MONTH",
        );
    }
    let (s, _, body) =
        get_statement(&api, &token, &this.to_string(), Some("application/json")).await;
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_error(
        StatusCode::from_u16(s).unwrap(),
        &v,
        406,
        "STATEMENT_FORMAT_NOT_ACCEPTABLE",
    );
    let (s, _, body) = get_statement(&api, "tgb_dev_nope", &this.to_string(), None).await;
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_error(
        StatusCode::from_u16(s).unwrap(),
        &v,
        401,
        "ORG_BILLING_TOKEN_INVALID",
    );
}

/// The consoles list and serve the same statements: an organization's to its members, a
/// partner's (its available funding, its customers' usage at retail and wholesale) to its team;
/// another tenant's answers 404.
#[tokio::test]
async fn the_consoles_serve_statements_to_their_own_people_only() {
    use super::console::joined;
    use admin_api::ledger::{self, AccountRef};
    let api = Api::start().await;
    let acme = api.owner("100").await;
    let (_, org) = api.active_customer(&acme, "cons", 10.0, 1.25).await;
    let (_, other_org) = api.active_customer(&acme, "cons-other", 1.0, 1.25).await;
    // A call of the organization, settled (charged at retail; the partner accrues wholesale).
    let now = chrono::Utc::now();
    let event = super::settlement::settled_event(
        "cons-1",
        org,
        "gpt-4o-mini",
        u64::try_from(now.timestamp_millis()).unwrap(),
        2_000_000_000,
        0,
    );
    api.state.stores.usage.append(&event).await.unwrap();
    admin_api::workers::settler::drain_once(&api.state, "t")
        .await
        .unwrap();
    let month = admin_api::services::statements::Month::of(now).to_string();

    let mut ann = joined(&api, Some(org), None, "ann@cons.example", "member").await;
    let usage = ann.get(&format!("/console/orgs/{org}/usage")).await;
    assert!(
        usage
            .body
            .contains(&format!("/console/orgs/{org}/statements/{month}.pdf")),
        "{}",
        usage.body
    );
    let csv = ann
        .get(&format!("/console/orgs/{org}/statements/{month}.csv"))
        .await;
    assert_eq!(csv.status, 200, "{}", csv.body);
    let book = ledger::balance(&api.state.db, &AccountRef::org_wallet(org).code)
        .await
        .unwrap()
        .nanos();
    assert_eq!(nanos(records(&csv.body, "closing_balance_usd")[0][1]), book);
    let pdf = ann
        .get(&format!("/console/orgs/{org}/statements/{month}.pdf"))
        .await;
    assert_eq!(pdf.status, 200);
    for forbidden in [
        format!("/console/orgs/{other_org}/statements/{month}.csv"),
        format!("/console/orgs/{org}/statements/{month}.xls"),
        format!("/console/orgs/{org}/statements/2999-01.csv"),
        format!("/console/partners/{}/statements/{month}.csv", acme.id),
    ] {
        assert_eq!(ann.get(&forbidden).await.status, 404, "{forbidden}");
    }

    let mut olga = joined(&api, None, Some(acme.id), "olga@acme.example", "viewer").await;
    let statement = olga
        .get(&format!(
            "/console/partners/{}/statements/{month}.csv",
            acme.id
        ))
        .await;
    assert_eq!(statement.status, 200, "{}", statement.body);
    let s = &statement.body;
    assert_eq!(records(s, "statement")[0][1], "partner");
    let funding = ledger::balance(&api.state.db, &AccountRef::partner_available(acme.id).code)
        .await
        .unwrap()
        .nanos();
    let opening = nanos(records(s, "opening_balance_usd")[0][1]);
    let moved: i64 = records(s, "movement")
        .iter()
        .skip(1)
        .map(|r| nanos(r[4]))
        .sum();
    let closing = nanos(records(s, "closing_balance_usd")[0][1]);
    assert_eq!(closing, funding, "closing = the ledger's available funding");
    assert_eq!(
        opening + moved,
        closing,
        "usage does not touch available funding"
    );
    let descriptions: Vec<&str> = records(s, "movement")
        .iter()
        .skip(1)
        .map(|r| r[2])
        .collect();
    assert!(
        descriptions.contains(&"funding added")
            && descriptions
                .iter()
                .any(|d| d.starts_with("allocated to customer")),
        "{s}"
    );
    let totals = &records(s, "usage_total_usd")[0];
    assert_eq!(nanos(totals[1]), 2_000_000_000, "{s}");
    assert_eq!(
        nanos(totals[2]),
        nanos(records(s, "usage_posted_usd")[0][1]),
        "wholesale = the ledger's accrual: {s}"
    );
    assert!(
        nanos(totals[2]) > 0 && nanos(totals[2]) < 2_000_000_000,
        "{s}"
    );
    let mut stranger = joined(
        &api,
        None,
        Some(api.owner("1").await.id),
        "x@y.example",
        "owner",
    )
    .await;
    assert_eq!(
        stranger
            .get(&format!(
                "/console/partners/{}/statements/{month}.csv",
                acme.id
            ))
            .await
            .status,
        404
    );
}
