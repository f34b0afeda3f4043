//! Proof of address (issue 42, DESIGN §6c "A link is never proof of an address"): the two
//! attacks found against the third wave, scripted over HTTP as they were run, now fail; a code
//! is what completes, never a link; every check is counted by one limiter.

use super::console::{Browser, PASSWORD, SESSION, audit_texts};
use super::*;

const VICTIM: &str = "victim@corp.example";
const A_PASSWORD: &str = "partner A chose this one";

/// The invitation token of a create answer.
fn token_of(created: &Value) -> String {
    created["data"]["activation"]["invite_url"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string()
}

async fn post_json(api: &Api, token: &str, body: Value) -> (StatusCode, HeaderMapLite, Value) {
    let resp = api
        .http
        .post(format!("{}/invitations/{token}/accept", api.base))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let retry = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let v = resp.json().await.unwrap_or(Value::Null);
    (status, HeaderMapLite { retry }, v)
}

struct HeaderMapLite {
    retry: Option<String>,
}

async fn org_status(api: &Api, partner: &Partner, customer: i64) -> String {
    let (_, v) = api.get(partner, &format!("/customers/{customer}")).await;
    v["data"]["status"].as_str().unwrap().to_string()
}

/// Attack 1 and 2 of the issue: partner A pre-registers the victim's address through its own
/// invitation with a password of its choosing; partner B's invitation of the same address is
/// posted with the address alone. Neither holder of a link gets an account or an organization;
/// only the person who reads the mailbox activates, and A's password never opens anything.
#[tokio::test]
async fn a_link_holder_never_gets_an_account_it_did_not_prove() {
    let api = Api::start().await;
    let a = api.owner("100").await;
    // Both partners create a customer whose contact is the victim's address.
    let create_for = |p: Partner, external: &'static str| {
        let api = &api;
        async move {
            let (s, v) = api
                .write(
                    &p,
                    Method::PUT,
                    &format!("/customers/by-external-id/{external}"),
                    Some(
                        &json!({"name": format!("Org {external}"), "contact_email": VICTIM,
                                "initial_allocation_usd": 5, "retail_rate_multiplier": 1}),
                    ),
                )
                .await;
            assert_eq!(s, 200, "{v}");
            (token_of(&v), v["data"]["customer"]["id"].as_i64().unwrap())
        }
    };
    let (token_a, customer_a) = create_for(a.clone(), "victim-at-a").await;
    // A posts the victim's address with A's password to the link it was handed.
    let (s, _, v) = post_json(
        &api,
        &token_a,
        json!({"email": VICTIM, "password": A_PASSWORD}),
    )
    .await;
    assert_eq!(s, 202, "{v}");
    assert_eq!(v["data"]["status"], "verification_required");
    assert_eq!(v["code"], 0);
    assert_eq!(api.count("console_users").await, 0, "no account yet");
    assert_eq!(org_status(&api, &a, customer_a).await, "pending_activation");
    // A cannot read the mailbox: a guessed code is refused, one message.
    let (s, _, v) = post_json(
        &api,
        &token_a,
        json!({"email": VICTIM, "password": A_PASSWORD, "verification_code": "12345678"}),
    )
    .await;
    assert_eq!(s, 401, "{v}");
    assert_eq!(v["reason"], "INVITATION_VERIFICATION_FAILED");
    assert_eq!(api.count("console_users").await, 0);
    assert_eq!(org_status(&api, &a, customer_a).await, "pending_activation");
    // Partner B invites the same address; a program posts the address alone: never activates.
    let b = api.owner("100").await;
    let (token_b, customer_b) = create_for(b.clone(), "victim-at-b").await;
    let (s, _, v) = post_json(&api, &token_b, json!({"email": VICTIM})).await;
    assert_eq!(s, 400, "{v}");
    assert_eq!(org_status(&api, &b, customer_b).await, "pending_activation");
    // A's password opens nothing.
    let mut attacker = Browser::new(&api);
    assert_eq!(attacker.sign_in(VICTIM, A_PASSWORD).await.status, 401);
    // The real person opens B's invitation, chooses a password, reads the code: B's
    // organization is theirs, and nobody else's.
    let mut person = Browser::new(&api);
    let path = format!("/invitations/{token_b}");
    let csrf = person.get(&path).await.csrf();
    let done = person
        .with_code(
            &api,
            &format!("{path}/accept"),
            &[("csrf", &csrf), ("email", VICTIM), ("password", PASSWORD)],
            VICTIM,
        )
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    assert_eq!(org_status(&api, &b, customer_b).await, "active");
    assert_eq!(org_status(&api, &a, customer_a).await, "pending_activation");
    let home = person.get("/console/").await;
    assert!(home.body.contains("Org victim-at-b"), "{}", home.body);
    assert!(!home.body.contains("Org victim-at-a"), "{}", home.body);
    assert_eq!(api.count("console_users").await, 1);
    assert_eq!(api.count("org_members").await, 1);
    // A's password still opens nothing; the person's does.
    assert_eq!(attacker.sign_in(VICTIM, A_PASSWORD).await.status, 401);
    assert_eq!(
        Browser::new(&api).sign_in(VICTIM, PASSWORD).await.status,
        303
    );
    // A's pending challenge was A's: its code (mailed to the person) does not complete A's
    // invitation with A's password in the person's name unless the person posts it, and a
    // post of A's invitation from another browser with the person's code but without the flow
    // cookie finds nothing.
    let codes = testkit::mailed_codes(&api.outbox, VICTIM);
    let mut stranger = Browser::new(&api);
    let page = stranger.get(&format!("/invitations/{token_a}")).await;
    let refused = stranger
        .post(
            &format!("/invitations/{token_a}/accept"),
            &[("csrf", &page.csrf()), ("verification_code", &codes[0])],
            None,
        )
        .await;
    assert_eq!(refused.status, 401, "{}", refused.body);
    assert_eq!(org_status(&api, &a, customer_a).await, "pending_activation");
}

/// 40 wrong tries on one invitation meet 429 (with `Retry-After` and the refusal's reason), and
/// change nothing; the first steps, which mail a code, are counted too.
#[tokio::test]
async fn forty_wrong_tries_on_one_invitation_meet_429() {
    let api = Api::start().await;
    let p = api.owner("100").await;
    let (_, created) = api.create(&p, "guessed", 1.0, 1.0).await;
    let token = token_of(&created);
    let email = "owner@guessed.example";
    let customer = created["data"]["customer"]["id"].as_i64().unwrap();
    let (s, _, _) = post_json(&api, &token, json!({"email": email, "password": PASSWORD})).await;
    assert_eq!(s, 202);
    let mut statuses = Vec::new();
    for i in 0..40 {
        let (s, headers, v) = post_json(
            &api,
            &token,
            json!({"email": email, "password": PASSWORD, "verification_code": format!("{:08}", i)}),
        )
        .await;
        if s == 429 {
            assert_eq!(v["reason"], "INVITATION_TOO_MANY_ATTEMPTS", "{v}");
            assert_eq!(v["code"], 429);
            let wait: u64 = headers.retry.unwrap().parse().unwrap();
            assert!((1..=900).contains(&wait));
            assert_eq!(v["metadata"]["retry_after_seconds"], wait);
        } else {
            assert_eq!(s, 401, "{v}");
        }
        statuses.push(s.as_u16());
    }
    let allowed = statuses.iter().filter(|s| **s == 401).count();
    assert!(allowed <= 8, "{statuses:?}");
    assert_eq!(statuses.last(), Some(&429));
    assert_eq!(org_status(&api, &p, customer).await, "pending_activation");
    assert_eq!(api.count("console_users").await, 0);
    // First steps (each mails a code) meet the same limiter.
    let (s, headers, _) =
        post_json(&api, &token, json!({"email": email, "password": PASSWORD})).await;
    assert_eq!(s, 429);
    assert!(headers.retry.is_some());
    // The refusals are audited, never with a password or a code.
    let audit = audit_texts(&api).await;
    assert!(
        audit
            .iter()
            .any(|a| a.contains("check_failed") && a.contains("invitation"))
    );
    assert!(!audit.iter().any(|a| a.contains(PASSWORD)));
}

/// A code works once, for 15 minutes, 5 tries; a new first step ends the previous code (one
/// live code per address and link); the mail has the 8 digits alone on one line.
#[tokio::test]
async fn a_code_is_single_use_short_lived_and_replaced_by_a_new_one() {
    let api = Api::start().await;
    let p = api.owner("100").await;
    let (_, created) = api.create(&p, "codes", 1.0, 1.0).await;
    let token = token_of(&created);
    let email = "owner@codes.example";
    let start = chrono::Utc::now();
    api.state.clock.set(Some(start));
    let first = json!({"email": email, "password": PASSWORD});
    let (s, _, _) = post_json(&api, &token, first.clone()).await;
    assert_eq!(s, 202);
    let old = testkit::next_code(&api.outbox, email, 0).await;
    let (s, _, _) = post_json(&api, &token, first.clone()).await;
    assert_eq!(s, 202);
    let new = testkit::next_code(&api.outbox, email, 1).await;
    let with =
        |code: &str| json!({"email": email, "password": PASSWORD, "verification_code": code});
    if old != new {
        let (s, _, _) = post_json(&api, &token, with(&old)).await;
        assert_eq!(s, 401, "the first code ended when the second was sent");
    }
    // 15 minutes later the new one has expired too.
    api.state
        .clock
        .set(Some(start + chrono::Duration::minutes(15)));
    let (s, _, _) = post_json(&api, &token, with(&new)).await;
    assert_eq!(s, 401, "expired");
    // A fresh code works once.
    let (s, _, _) = post_json(&api, &token, first.clone()).await;
    assert_eq!(s, 202);
    let fresh = testkit::next_code(&api.outbox, email, 2).await;
    let (s, _, v) = post_json(&api, &token, with(&fresh)).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["data"]["status"], "active");
    let (s, _, _) = post_json(&api, &token, with(&fresh)).await;
    assert_eq!(s, 409, "accepted once");
    api.state.clock.set(None);
}

/// An account made before proof of address (never proven) signs in only through a mailed
/// code; until then it has no session. No organization is ever claimed at a sign-in: an
/// organization whose owner address is the account's but which has no owner member stays
/// without one.
#[tokio::test]
async fn an_unproven_account_proves_its_address_at_sign_in_and_claims_nothing() {
    use sea_orm::{ActiveModelTrait, EntityTrait, Set};
    let api = Api::start().await;
    let now = chrono::Utc::now();
    let email = "old@before.example";
    admin_api::services::people::create_user(&api.state.db, email, PASSWORD, None, now)
        .await
        .unwrap();
    // An organization activated by a program before this change: owner address set, no owner.
    let p = api.owner("100").await;
    let (_, created) = api.create(&p, "before", 1.0, 1.0).await;
    let customer = created["data"]["customer"]["id"].as_i64().unwrap();
    let org_id = entities::customers::Entity::find_by_id(customer)
        .one(&api.state.db)
        .await
        .unwrap()
        .unwrap()
        .organization_id;
    let org = entities::organizations::Entity::find_by_id(org_id)
        .one(&api.state.db)
        .await
        .unwrap()
        .unwrap();
    let mut o: entities::organizations::ActiveModel = org.into();
    o.owner_email = Set(Some(email.into()));
    o.update(&api.state.db).await.unwrap();
    let mut b = Browser::new(&api);
    // The right password: a code page, no session.
    let page = b.sign_in(email, PASSWORD).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("Verification code"));
    assert!(!b.cookies.contains_key(SESSION));
    let code = testkit::next_code(&api.outbox, email, 0).await;
    let wrong = if code == "00000000" {
        "00000001"
    } else {
        "00000000"
    };
    let refused = b
        .post(
            "/console/sign-in",
            &[("csrf", &page.csrf()), ("verification_code", wrong)],
            None,
        )
        .await;
    assert_eq!(refused.status, 401);
    assert!(!b.cookies.contains_key(SESSION));
    // A new sign-in, a new code.
    let page = b.sign_in(email, PASSWORD).await;
    let code = testkit::next_code(&api.outbox, email, 1).await;
    let done = b
        .post(
            "/console/sign-in",
            &[("csrf", &page.csrf()), ("verification_code", &code)],
            None,
        )
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    assert!(b.cookies.contains_key(SESSION));
    let home = b.get("/console/").await;
    assert_eq!(home.status, 200);
    assert!(!home.body.contains("Org before"), "{}", home.body);
    assert_eq!(api.count("org_members").await, 0, "nothing claimed");
    // Proven now: the next sign-in needs no code.
    assert_eq!(
        Browser::new(&api).sign_in(email, PASSWORD).await.status,
        303
    );
    assert!(
        audit_texts(&api)
            .await
            .iter()
            .any(|a| a.starts_with("address_proven"))
    );
}

/// Passwords longer than 128 characters are refused before any hashing, on every path that
/// checks one; nothing is counted or changed.
#[tokio::test]
async fn passwords_past_128_characters_are_refused_before_hashing() {
    let api = Api::start().await;
    let long = "é".repeat(129);
    let mut b = Browser::new(&api);
    let page = b.sign_in("someone@long.example", &long).await;
    assert_eq!(page.status, 400, "{}", page.body);
    let p = api.owner("100").await;
    let (_, created) = api.create(&p, "long", 1.0, 1.0).await;
    let token = token_of(&created);
    let (s, _, v) = post_json(
        &api,
        &token,
        json!({"email": "owner@long.example", "password": long}),
    )
    .await;
    assert_eq!(s, 400, "{v}");
    assert_eq!(v["reason"], "INVITATION_WEAK_PASSWORD");
    assert_eq!(api.count("console_challenges").await, 0);
    assert_eq!(api.count("console_throttles").await, 0, "nothing counted");
}

/// A join link is spent by one conditional update: the same code posted twice at once (two
/// tabs of one browser) makes one membership, and the other post is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_completions_of_a_join_link_make_one_membership() {
    let api = Api::start().await;
    let (_, org, _) = super::console::activate(&api, "join-race").await;
    let email = "racer@race.example";
    let link = admin_api::cli::user_invite(&api.state, email, Some(org), None, "member")
        .await
        .unwrap();
    let url = link["sign_up_url"].as_str().unwrap();
    let join = url[url.find("/console/join/").unwrap()..].to_string();
    let mut first = Browser::new(&api);
    let csrf = first.get(&join).await.csrf();
    let step = first
        .post(
            &join,
            &[("csrf", &csrf), ("email", email), ("password", PASSWORD)],
            None,
        )
        .await;
    assert_eq!(step.status, 200, "{}", step.body);
    let code = testkit::next_code(&api.outbox, email, 0).await;
    let csrf = step.csrf();
    let mut second = Browser::new(&api);
    second.cookies = first.cookies.clone();
    let form = [
        ("csrf", csrf.as_str()),
        ("verification_code", code.as_str()),
    ];
    let (a, b) = tokio::join!(
        first.post(&join, &form, None),
        second.post(&join, &form, None)
    );
    let mut statuses = [a.status, b.status];
    statuses.sort_unstable();
    assert_eq!(statuses[0], 303, "one wins: {statuses:?}");
    assert_ne!(statuses[1], 303, "the other is refused: {statuses:?}");
    assert_eq!(
        api.count("org_members").await,
        2,
        "the owner and one new member"
    );
    assert_eq!(api.count("console_users").await, 2);
}

/// The code stays a line of its own in the mail whatever the organization is called (a name
/// beyond ASCII is quoted-printable, never base64).
#[tokio::test]
async fn a_code_mail_stays_readable_whatever_the_names() {
    let api = Api::start().await;
    let p = api.owner("100").await;
    let name = "组织名称非常长的中文名字测试".repeat(4);
    let (s, v) = api
        .write(
            &p,
            Method::PUT,
            "/customers/by-external-id/unicode-name",
            Some(
                &json!({"name": name, "slug": "unicode-name", "contact_email": "boss@unicode.example",
                        "initial_allocation_usd": 1, "retail_rate_multiplier": 1}),
            ),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = api
        .accept_invitation(&token_of(&v), "boss@unicode.example")
        .await;
    assert_eq!(s, 200, "{v}");
    // A name's limit counts characters, not bytes: 200 CJK characters are a valid name.
    for (n, status) in [(200, 200), (201, 400)] {
        let (s, v) = api
            .write(
                &p,
                Method::PUT,
                &format!("/customers/by-external-id/long-name-{n}"),
                Some(
                    &json!({"name": "名".repeat(n), "slug": format!("long-name-{n}"),
                            "contact_email": "boss@unicode.example",
                            "initial_allocation_usd": 0, "retail_rate_multiplier": 1}),
                ),
            )
            .await;
        assert_eq!(s, status, "{n}: {v}");
    }
}
