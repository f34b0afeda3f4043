//! The console over HTTP (issue 28, first part): activation by signing up with exactly the
//! invited address, sessions (cookie flags, rotation, sign-out), CSRF and origin refusals, the
//! sign-in throttle, no account enumeration, members-only pages, security headers, and a balance
//! that is never shown as zero when it is not reconciled.

use super::*;

pub(super) const PASSWORD: &str = "correct horse battery staple";

/// The session cookie's name: the test deployment's public URL is https, so it carries the
/// `__Host-` prefix (no `Domain`, path `/`, `Secure`).
pub(super) const SESSION: &str = "__Host-tg_session";

/// A browser-like client of the console: keeps cookies by hand, never follows redirects.
pub(super) struct Browser {
    http: reqwest::Client,
    base: String,
    pub(super) cookies: std::collections::BTreeMap<String, String>,
    /// The client address a gateway in front would report (`x-tollgate-client-ip`).
    client: Option<&'static str>,
}

pub(super) struct Page {
    pub(super) status: u16,
    pub(super) headers: reqwest::header::HeaderMap,
    pub(super) body: String,
}

impl Page {
    pub(super) fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    pub(super) fn location(&self) -> &str {
        self.header("location")
    }

    /// The value of the hidden `csrf` field of the page's (first) form.
    pub(super) fn csrf(&self) -> String {
        let at = self
            .body
            .find("name=\"csrf\" value=\"")
            .expect("a csrf field");
        let rest = &self.body[at + "name=\"csrf\" value=\"".len()..];
        rest[..rest.find('"').unwrap()].to_string()
    }
}

impl Browser {
    pub(super) fn new(api: &Api) -> Browser {
        Browser {
            http: reqwest::Client::builder()
                .no_proxy()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            base: api.base.clone(),
            cookies: Default::default(),
            client: None,
        }
    }

    /// A browser behind a gateway that reports its address as `ip`.
    pub(super) fn from(api: &Api, ip: &'static str) -> Browser {
        Browser {
            client: Some(ip),
            ..Browser::new(api)
        }
    }

    pub(super) fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    async fn keep(&mut self, resp: reqwest::Response) -> Page {
        for c in resp.headers().get_all("set-cookie") {
            let c = c.to_str().unwrap();
            let (pair, _) = c.split_once(';').unwrap_or((c, ""));
            let (k, v) = pair.split_once('=').unwrap();
            if c.contains("Max-Age=0") {
                self.cookies.remove(k);
            } else {
                self.cookies.insert(k.to_string(), v.to_string());
            }
        }
        Page {
            status: resp.status().as_u16(),
            headers: resp.headers().clone(),
            body: resp.text().await.unwrap(),
        }
    }

    pub(super) async fn get(&mut self, path: &str) -> Page {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .header("cookie", self.cookie_header())
            .header("x-tollgate-client-ip", self.client.unwrap_or_default())
            .send()
            .await
            .unwrap();
        self.keep(resp).await
    }

    pub(super) async fn post(
        &mut self,
        path: &str,
        form: &[(&str, &str)],
        origin: Option<&str>,
    ) -> Page {
        let body: String = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .header("cookie", self.cookie_header())
            .header("content-type", "application/x-www-form-urlencoded")
            .header("x-tollgate-client-ip", self.client.unwrap_or_default())
            .body(body);
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        let resp = req.send().await.unwrap();
        self.keep(resp).await
    }

    /// A two-step post as a person (DESIGN §6c): `first` (address and password) answers the
    /// code page; the code mailed to `email` is then posted from it. The second answer.
    pub(super) async fn with_code(
        &mut self,
        api: &Api,
        action: &str,
        first: &[(&str, &str)],
        email: &str,
    ) -> Page {
        let known = testkit::mailed_codes(&api.outbox, email).len();
        let step = self.post(action, first, None).await;
        assert_eq!(step.status, 200, "{}", step.body);
        assert!(step.body.contains("Verification code"), "{}", step.body);
        let code = testkit::next_code(&api.outbox, email, known).await;
        let csrf = step.csrf();
        self.post(
            action,
            &[("csrf", &csrf), ("verification_code", &code)],
            None,
        )
        .await
    }

    pub(super) async fn sign_in(&mut self, email: &str, password: &str) -> Page {
        let form = self.get("/console/sign-in").await;
        let csrf = form.csrf();
        self.post(
            "/console/sign-in",
            &[
                ("csrf", &csrf),
                ("email", email),
                ("password", password),
                ("next", "/console/"),
            ],
            None,
        )
        .await
    }
}

/// A customer of a new partner, created and not activated: (customer id, invitation path, email).
async fn invited(api: &Api, external: &str) -> (i64, String, String) {
    invited_by(api, &api.owner("100").await, external).await
}

/// A customer of partner `owner` invited (10 USD, rate 1): its id, invitation path and contact.
async fn invited_by(api: &Api, owner: &Partner, external: &str) -> (i64, String, String) {
    let (s, v) = api.create(owner, external, 10.0, 1.0).await;
    assert_eq!(s, 200, "{v}");
    let url = v["data"]["activation"]["invite_url"].as_str().unwrap();
    let path = url[url.find("/invitations/").unwrap()..].to_string();
    (
        v["data"]["customer"]["id"].as_i64().unwrap(),
        path,
        format!("owner@{external}.example"),
    )
}

/// Activates through the invitation page as a person: returns the browser (signed in) and the
/// organization id.
pub(super) async fn activate(api: &Api, external: &str) -> (Browser, i64, String) {
    activate_by(api, &api.owner("100").await, external).await
}

/// As [`activate`], a customer of partner `owner`.
pub(super) async fn activate_by(
    api: &Api,
    owner: &Partner,
    external: &str,
) -> (Browser, i64, String) {
    let (_, path, email) = invited_by(api, owner, external).await;
    let mut b = Browser::new(api);
    let page = b.get(&path).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let csrf = page.csrf();
    let done = b
        .with_code(
            api,
            &format!("{path}/accept"),
            &[("csrf", &csrf), ("email", &email), ("password", PASSWORD)],
            &email,
        )
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    let org: i64 = done
        .location()
        .strip_prefix("/console/orgs/")
        .unwrap()
        .parse()
        .unwrap();
    (b, org, email)
}

/// Every audit record as one line of text (action, target, detail, address).
pub(super) async fn audit_texts(api: &Api) -> Vec<String> {
    use sea_orm::EntityTrait;
    entities::audit_records::Entity::find()
        .all(&api.state.db)
        .await
        .unwrap()
        .into_iter()
        .map(|r| {
            format!(
                "{} {} {} {}",
                r.action,
                r.target.unwrap_or_default(),
                r.detail,
                r.ip.unwrap_or_default()
            )
        })
        .collect()
}

/// A new person who joined organization `org` as a member through an operator's sign-up link,
/// signed in.
async fn member_of(api: &Api, org: i64, email: &str) -> Browser {
    joined(api, Some(org), None, email, "member").await
}

/// A new person who joined organization `org` or partner `partner`'s team with `role` through an
/// operator's sign-up link, signed in.
pub(super) async fn joined(
    api: &Api,
    org: Option<i64>,
    partner: Option<i64>,
    email: &str,
    role: &str,
) -> Browser {
    let link = admin_api::cli::user_invite(&api.state, email, org, partner, role)
        .await
        .unwrap();
    let url = link["sign_up_url"].as_str().unwrap();
    let join = url[url.find("/console/join/").unwrap()..].to_string();
    let mut b = Browser::new(api);
    let csrf = b.get(&join).await.csrf();
    let done = b
        .with_code(
            api,
            &join,
            &[("csrf", &csrf), ("email", email), ("password", PASSWORD)],
            &email.to_ascii_lowercase(),
        )
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    b
}

#[tokio::test]
async fn the_invited_person_signs_up_and_owns_the_activated_organization() {
    let api = Api::start().await;
    let (_, path, email) = invited(&api, "console-a").await;
    let mut b = Browser::new(&api);
    let page = b.get(&path).await;
    assert_eq!(page.status, 200);
    for needle in [
        "<label for=\"email\">Email</label>",
        "<label for=\"password\">Password</label>",
        "Activate Org console-a",
    ] {
        assert!(page.body.contains(needle), "{needle}: {}", page.body);
    }
    assert!(
        page.header("content-security-policy")
            .contains("script-src 'self'")
    );
    assert_eq!(page.header("x-frame-options"), "DENY");
    assert!(!page.body.contains("<script>"), "no inline script");
    let csrf = page.csrf();
    let accept = format!("{path}/accept");
    // Another address, a weak password: refused, nothing changes.
    for (mail, pw, status) in [
        ("eve@evil.example", PASSWORD, 403),
        (email.as_str(), "short", 400),
    ] {
        let p = b
            .post(
                &accept,
                &[("csrf", &csrf), ("email", mail), ("password", pw)],
                None,
            )
            .await;
        assert_eq!(p.status, status, "{mail}: {}", p.body);
    }
    // A cross-site post is refused before anything is read.
    let p = b
        .post(
            &accept,
            &[("csrf", &csrf), ("email", &email), ("password", PASSWORD)],
            Some("https://evil.example"),
        )
        .await;
    assert_eq!(p.status, 403);
    assert_eq!(api.count("console_users").await, 0);
    assert_eq!(api.count("org_members").await, 0);
    // The invited address, a good password: active, owner, signed in.
    let done = b
        .with_code(
            &api,
            &accept,
            &[
                ("csrf", &csrf),
                ("email", &email.to_uppercase()),
                ("password", PASSWORD),
            ],
            &email,
        )
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    let cookie = done
        .headers
        .get_all("set-cookie")
        .iter()
        .map(|c| c.to_str().unwrap().to_string())
        .find(|c| c.starts_with("__Host-tg_session="))
        .unwrap();
    for flag in ["HttpOnly", "SameSite=Lax", "Path=/"] {
        assert!(cookie.contains(flag), "{cookie}");
    }
    assert!(
        cookie.contains("Secure") && !cookie.contains("Domain"),
        "the public URL is https: {cookie}"
    );
    let overview = b.get(done.location()).await;
    assert_eq!(
        overview.header("strict-transport-security"),
        "max-age=31536000",
        "HSTS over https"
    );
    assert_eq!(overview.status, 200, "{}", overview.body);
    assert!(overview.body.contains("Org console-a") && overview.body.contains("owner"));
    assert!(
        overview
            .body
            .contains("data-figure=\"available\"><data value=\"10\""),
        "{}",
        overview.body
    );
    assert_eq!(overview.header("cache-control"), "no-store");
    // The daily spend chart: one bar per day of the 14, no spend yet → 1-unit stubs.
    assert!(
        overview.body.contains("<svg")
            && overview
                .body
                .contains("role=\"img\" aria-label=\"Daily spend, last 14 days")
    );
    assert_eq!(overview.body.matches("<g class=\"col\">").count(), 14);
    assert_eq!(overview.body.matches("<rect class=\"stub\"").count(), 14);
    let home = b.get("/console/").await;
    assert!(home.body.contains("Org console-a"), "{}", home.body);
    assert_eq!(api.count("console_users").await, 1);
    assert_eq!(api.count("org_members").await, 1);
    assert!(
        api.count("audit_records").await >= 2,
        "activation and sign-in recorded"
    );
    // The invitation is spent.
    let again = b.get(&path).await;
    assert_eq!(again.status, 410);
}

#[tokio::test]
async fn sign_in_rotates_sessions_refuses_alike_and_sign_out_ends_the_session() {
    let api = Api::start().await;
    let (mut first, org, email) = activate(&api, "console-b").await;
    let mut b = Browser::new(&api);
    // Wrong password and unknown address: the same answer.
    let wrong = b.sign_in(&email, "not the password at all").await;
    let unknown = b
        .sign_in("nobody@nowhere.example", "not the password at all")
        .await;
    assert_eq!((wrong.status, unknown.status), (401, 401));
    let message = "The email address or the password is not correct.";
    assert!(wrong.body.contains(message) && unknown.body.contains(message));
    assert!(!b.cookies.contains_key(SESSION));
    // Signed in: a new session, distinct from the first browser's.
    let ok = b.sign_in(&email, PASSWORD).await;
    assert_eq!((ok.status, ok.location()), (303, "/console/"));
    assert_ne!(b.cookies[SESSION], first.cookies[SESSION]);
    let page = b.get(&format!("/console/orgs/{org}")).await;
    assert_eq!(page.status, 200);
    // Sign-out needs the session's token.
    let refused = b
        .post("/console/sign-out", &[("csrf", "forged")], None)
        .await;
    assert_eq!(refused.status, 403);
    let csrf = page.csrf();
    let session = b.cookies[SESSION].clone();
    let out = b.post("/console/sign-out", &[("csrf", &csrf)], None).await;
    assert_eq!((out.status, out.location()), (303, "/console/sign-in"));
    // The ended session's cookie opens nothing any more; the other browser's session lives.
    let mut stale = Browser::new(&api);
    stale.cookies.insert(SESSION.into(), session);
    let gone = stale.get("/console/").await;
    assert_eq!(gone.status, 303);
    assert!(gone.location().starts_with("/console/sign-in"));
    assert_eq!(first.get("/console/").await.status, 200);
}

#[tokio::test]
async fn forged_and_cross_site_sign_ins_are_refused_and_guessing_is_throttled() {
    let api = Api::start().await;
    let (_, _, email) = activate(&api, "console-c").await;
    let mut b = Browser::new(&api);
    // No double-submit token, or a cross-site origin: 403, no session.
    let form = b.get("/console/sign-in").await;
    let csrf = form.csrf();
    let no_token = b
        .post(
            "/console/sign-in",
            &[("email", &email), ("password", PASSWORD)],
            None,
        )
        .await;
    assert_eq!(no_token.status, 403);
    let cross = b
        .post(
            "/console/sign-in",
            &[("csrf", &csrf), ("email", &email), ("password", PASSWORD)],
            Some("https://evil.example"),
        )
        .await;
    assert_eq!(cross.status, 403);
    assert!(!b.cookies.contains_key(SESSION));
    // The one limiter (`services::limiter`): eight attempts per address go at once; the ninth is
    // refused even with the right password, for a minute, then each further attempt doubles
    // the wait (the test moves the service's clock).
    let start = chrono::Utc::now();
    api.state.clock.set(Some(start));
    for _ in 0..8 {
        assert_eq!(b.sign_in(&email, "wrong password here").await.status, 401);
    }
    let throttled = b.sign_in(&email, PASSWORD).await;
    assert_eq!(throttled.status, 429, "{}", throttled.body);
    let wait: i64 = throttled.header("retry-after").parse().unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    assert!(!b.cookies.contains_key(SESSION));
    api.state
        .clock
        .set(Some(start + chrono::Duration::seconds(61)));
    assert_eq!(b.sign_in(&email, "wrong password here").await.status, 401);
    let again = b.sign_in(&email, PASSWORD).await;
    assert_eq!(again.status, 429);
    let wait: i64 = again.header("retry-after").parse().unwrap();
    assert!((61..=120).contains(&wait), "the wait doubles: {wait}");
    // Never more than 15 minutes for its owner: past the wait the right password signs in, and
    // the address starts afresh.
    api.state
        .clock
        .set(Some(start + chrono::Duration::seconds(61 + 121)));
    assert_eq!(b.sign_in(&email, PASSWORD).await.status, 303);
    let mut fresh = Browser::new(&api);
    assert_eq!(
        fresh.sign_in(&email, "wrong password here").await.status,
        401
    );
    // Another address is not held up by this one.
    let (_, _, other) = activate(&api, "console-c2").await;
    assert_eq!(
        Browser::new(&api).sign_in(&other, PASSWORD).await.status,
        303
    );
    // Per client network: 30 attempts from one IPv6 /64 (spread over many addresses, each under
    // its own limit), then even a right password from there is refused; another network is not
    // held up.
    let mut guessers = [
        Browser::from(&api, "2001:db8:7:7::1"),
        Browser::from(&api, "2001:db8:7:7:ffff::2"),
    ];
    for i in 0..30 {
        let page = guessers[i % 2]
            .sign_in(&format!("guess{i}@nowhere.example"), "wrong password here")
            .await;
        assert_eq!(page.status, 401, "attempt {i}");
    }
    let refused = guessers[0].sign_in(&other, PASSWORD).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert!(!guessers[0].cookies.contains_key(SESSION));
    let mut neighbour = Browser::from(&api, "2001:db8:7:8::1");
    assert_eq!(neighbour.sign_in(&other, PASSWORD).await.status, 303);
    // Failures and the throttles they started are in the audit, never a password.
    let audit = audit_texts(&api).await;
    assert!(
        audit
            .iter()
            .any(|a| a.contains("check_failed") && a.contains(&email))
    );
    assert!(audit.iter().any(|a| a.contains("attempts_throttled")));
    assert!(!audit.iter().any(|a| a.contains("wrong password here")));
}

#[tokio::test]
async fn pages_are_for_members_only_and_a_balance_is_never_shown_as_zero() {
    let api = Api::start().await;
    let (mut alice, org_a, _) = activate(&api, "console-d").await;
    let (mut bob, org_b, _) = activate(&api, "console-e").await;
    for (browser, other) in [(&mut alice, org_b), (&mut bob, org_a)] {
        let page = browser.get(&format!("/console/orgs/{other}")).await;
        assert_eq!(page.status, 404, "another organization's page");
    }
    assert_eq!(alice.get("/console/orgs/999999").await.status, 404);
    assert_eq!(alice.get("/console/orgs/abc").await.status, 404);
    // Signed out: the sign-in page, and back to the page asked for.
    let mut anonymous = Browser::new(&api);
    let page = anonymous.get(&format!("/console/orgs/{org_a}")).await;
    assert_eq!(page.status, 303);
    assert_eq!(
        page.location(),
        format!("/console/sign-in?next=%2Fconsole%2Forgs%2F{org_a}")
    );
    // A wallet mirror the store lost: "being reconciled", no figure.
    api.state
        .stores
        .wallets
        .load(org_a, NanoUsd::from_nanos(1))
        .await
        .unwrap();
    let page = alice.get(&format!("/console/orgs/{org_a}")).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("being reconciled"), "{}", page.body);
    assert!(!page.body.contains("data-figure=\"available\""));
    // Assets are embedded and served with their types.
    let css = anonymous.get("/console/assets/console.css").await;
    assert_eq!(
        (css.status, css.header("content-type")),
        (200, "text/css; charset=utf-8")
    );
    assert_eq!(anonymous.get("/console/assets/nope.js").await.status, 404);
}

/// An operator's (or an owner's) sign-up link joins exactly the invited address with its role:
/// a new address signs up, an existing one signs in; the link is single use; another address or
/// a wrong password is refused and changes nothing.
#[tokio::test]
async fn sign_up_links_join_people_with_their_role() {
    let api = Api::start().await;
    let (mut owner, org, owner_email) = activate(&api, "console-f").await;
    let link =
        admin_api::cli::user_invite(&api.state, "Mia@Member.example", Some(org), None, "member")
            .await
            .unwrap();
    let url = link["sign_up_url"].as_str().unwrap();
    let path = url[url.find("/console/join/").unwrap()..].to_string();
    let mut mia = Browser::new(&api);
    let page = mia.get(&path).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("Join Org console-f") && page.body.contains("as member"),
        "{}",
        page.body
    );
    let csrf = page.csrf();
    let other = mia
        .post(
            &path,
            &[
                ("csrf", &csrf),
                ("email", "eve@evil.example"),
                ("password", PASSWORD),
            ],
            None,
        )
        .await;
    assert_eq!(other.status, 403);
    // Each answer is a fresh form with a fresh token.
    let csrf = other.csrf();
    let weak = mia
        .post(
            &path,
            &[
                ("csrf", &csrf),
                ("email", "mia@member.example"),
                ("password", "short"),
            ],
            None,
        )
        .await;
    assert_eq!(weak.status, 400);
    assert_eq!(api.count("org_members").await, 1, "nothing changed");
    let csrf = weak.csrf();
    let joined = mia
        .with_code(
            &api,
            &path,
            &[
                ("csrf", &csrf),
                ("email", "MIA@member.example"),
                ("password", PASSWORD),
            ],
            "mia@member.example",
        )
        .await;
    assert_eq!(
        (joined.status, joined.location()),
        (303, format!("/console/orgs/{org}").as_str())
    );
    let overview = mia.get(&format!("/console/orgs/{org}")).await;
    assert!(overview.body.contains(">member<"), "{}", overview.body);
    assert_eq!(mia.get(&path).await.status, 410, "single use");
    // An existing account joins a partner team by signing in with its password.
    let owner_partner = api.owner("1").await;
    let team = admin_api::cli::user_invite(
        &api.state,
        &owner_email,
        None,
        Some(owner_partner.id),
        "viewer",
    )
    .await
    .unwrap();
    let url = team["sign_up_url"].as_str().unwrap();
    let path = url[url.find("/console/join/").unwrap()..].to_string();
    let csrf = owner.get(&path).await.csrf();
    // A wrong password shows only at the second step (the first answers alike for every
    // address).
    let wrong = owner
        .with_code(
            &api,
            &path,
            &[
                ("csrf", &csrf),
                ("email", &owner_email),
                ("password", "not the right password"),
            ],
            &owner_email,
        )
        .await;
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    assert_eq!(api.count("partner_members").await, 0);
    let csrf = wrong.csrf();
    let ok = owner
        .with_code(
            &api,
            &path,
            &[
                ("csrf", &csrf),
                ("email", &owner_email),
                ("password", PASSWORD),
            ],
            &owner_email,
        )
        .await;
    assert_eq!(
        (ok.status, ok.location()),
        (
            303,
            format!("/console/partners/{}", owner_partner.id).as_str()
        ),
        "{}",
        ok.body
    );
    assert_eq!(api.count("partner_members").await, 1);
    assert_eq!(api.count("console_users").await, 2);
    // Bad commands.
    assert!(
        admin_api::cli::user_invite(&api.state, "x@y.example", Some(org), None, "admin")
            .await
            .is_err()
    );
    assert!(
        admin_api::cli::user_invite(&api.state, "x@y.example", Some(org), Some(1), "owner")
            .await
            .is_err()
    );
    assert!(
        admin_api::cli::user_invite(&api.state, "x@y.example", None, None, "owner")
            .await
            .is_err()
    );
}

/// The quickstart's demo (`demo` runs `demo::quickstart`): the demo organization is an active,
/// funded customer of the demo partner; both owners get a console sign-in (a fresh password each
/// time; the previous one stops working). The organization's owner sees balance, chart, usage and
/// keys; the partner's owner sees the customer with its spend and margin, and makes a partner
/// token that works on the partner API.
#[tokio::test]
async fn the_demo_prints_working_console_sign_ins_for_both_halves() {
    let api = Api::start().await;
    let s = &api.state;
    let first = admin_api::demo::quickstart(s, 1).await.unwrap();
    let second = admin_api::demo::quickstart(s, 1).await.unwrap();
    assert_eq!(second.key.console_email, "owner@demo.example");
    assert_eq!(second.partner_email, "partner@demo.example");
    assert_ne!(first.key.console_password, second.key.console_password);
    assert_ne!(first.partner_password, second.partner_password);
    assert_eq!(
        (
            first.partner_id,
            first.customer_id,
            first.key.organization_id
        ),
        (
            second.partner_id,
            second.customer_id,
            second.key.organization_id
        ),
        "a second run finds the partner and its customer"
    );
    let org = second.key.organization_id;
    let partner = second.partner_id;
    // Funded once: 1,000 USD, of which the allocation's reservation (100 x wholesale / retail).
    let (_, funding) = api
        .get(
            &Partner {
                id: partner,
                token: admin_api::cli::partner_token(s, partner, &["partner:read".into()])
                    .await
                    .unwrap()["token"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            },
            "/funding",
        )
        .await;
    let reserved = funding["data"]["reserved_allocations_usd"]
        .as_f64()
        .unwrap();
    assert!(reserved > 0.0 && reserved < 100.0, "{funding}");
    assert_eq!(
        funding["data"]["available_funding_usd"].as_f64().unwrap() + reserved,
        1000.0,
        "{funding}"
    );

    let mut b = Browser::new(&api);
    assert_eq!(
        b.sign_in(&first.key.console_email, &first.key.console_password)
            .await
            .status,
        401
    );
    let ok = b
        .sign_in(&second.key.console_email, &second.key.console_password)
        .await;
    assert_eq!(ok.status, 303);
    let home = b.get("/console/").await;
    assert!(home.body.contains("Demo organization"), "{}", home.body);
    let overview = b.get(&format!("/console/orgs/{org}")).await;
    assert!(
        overview
            .body
            .contains("data-figure=\"available\"><data value=\"100\""),
        "{}",
        overview.body
    );
    // The quickstart's promise: balance (above), a usage chart and the keys.
    assert_eq!(overview.body.matches("<g class=\"col\">").count(), 14);
    let usage = b.get(&format!("/console/orgs/{org}/usage")).await;
    assert_eq!(usage.status, 200);
    assert!(usage.body.contains("<figure class=\"chart\">"));
    let keys = b.get(&format!("/console/orgs/{org}/keys")).await;
    assert_eq!(
        keys.body.matches("<td>quickstart</td>").count(),
        2,
        "both demo keys listed: {}",
        keys.body
    );

    // A call settles (priced by the settler at the customer's group rates, as the gateway's are).
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    spend(
        &api,
        org,
        second.key.key_id,
        "gpt-4o-mini",
        &now,
        1_250_000,
        0,
    )
    .await;
    admin_api::workers::settler::drain_once(s, "t")
        .await
        .unwrap();

    let mut p = Browser::new(&api);
    assert_eq!(
        p.sign_in(&first.partner_email, &first.partner_password)
            .await
            .status,
        401
    );
    assert_eq!(
        p.sign_in(&second.partner_email, &second.partner_password)
            .await
            .status,
        303
    );
    let home = p.get("/console/").await;
    assert!(
        home.body
            .contains(&format!("href=\"/console/partners/{partner}\"")),
        "{}",
        home.body
    );
    let list = p
        .get(&format!("/console/partners/{partner}/customers"))
        .await;
    assert_eq!(list.status, 200, "{}", list.body);
    assert!(
        list.body.contains("Demo organization")
            && list.body.contains("<td class=\"num\"><data value=\"0.00125\" title=\"0.00125 USD\">0.00125</data></td>"),
        "the demo customer with its spend: {}",
        list.body
    );
    let margin = p.get(&format!("/console/partners/{partner}/usage")).await;
    assert_eq!(margin.status, 200, "{}", margin.body);
    assert!(
        margin
            .body
            .contains("data-figure=\"margin\"><data value=\"0.00045\""),
        "retail 1.25 over wholesale 0.8: {}",
        margin.body
    );
    let tokens = format!("/console/partners/{partner}/tokens");
    let page = p.get(&tokens).await;
    let made = p
        .post(
            &tokens,
            &[("csrf", &page.csrf()), ("scope", "partner:write")],
            None,
        )
        .await;
    assert_eq!(made.status, 200, "{}", made.body);
    let token = super::dashboard::shown_token(&made);
    let (status, me) = api
        .get(
            &Partner { id: partner, token },
            "/customers/by-external-id/demo",
        )
        .await;
    assert_eq!(status, 200, "{me}");
    assert_eq!(me["data"]["status"], "active");
}

/// The keys page: owners and administrators create (the secret shown once, published so the
/// gateway accepts it) and disable keys (it leaves the directory at once); a member sees the list
/// without actions and a forged post of theirs is refused and changes nothing; another
/// organization's key reads as not found.
#[tokio::test]
async fn keys_are_created_once_shown_and_disabled_by_managers_only() {
    let api = Api::start().await;
    let (mut owner, org, _) = activate(&api, "console-g").await;
    let keys_path = format!("/console/orgs/{org}/keys");
    let page = owner.get(&keys_path).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("No keys yet") && page.body.contains("Create a key"));
    let csrf = page.csrf();
    let bad = owner
        .post(
            &keys_path,
            &[("csrf", &csrf), ("name", ""), ("group_id", "1")],
            None,
        )
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    let past = owner
        .post(
            &keys_path,
            &[
                ("csrf", &csrf),
                ("name", "old"),
                ("group_id", "1"),
                ("expires_on", "2001-01-01"),
            ],
            None,
        )
        .await;
    assert_eq!(past.status, 400);
    assert_eq!(api.count("customer_api_keys").await, 0, "nothing created");
    let limits = owner
        .post(
            &keys_path,
            &[
                ("csrf", &csrf),
                ("name", "x"),
                ("group_id", "1"),
                ("max_concurrency", "0"),
            ],
            None,
        )
        .await;
    assert_eq!(limits.status, 400, "a limit below 1 is refused");
    assert!(limits.body.contains("max_concurrency"), "{}", limits.body);
    let created = owner
        .post(
            &keys_path,
            &[
                ("csrf", &csrf),
                ("name", "prod"),
                ("group_id", "1"),
                ("max_concurrency", "3"),
                ("requests_per_minute", ""),
            ],
            None,
        )
        .await;
    assert_eq!(created.status, 200, "{}", created.body);
    let at = created
        .body
        .find("id=\"new-key\" class=\"secret\">")
        .unwrap();
    let rest = &created.body[at + "id=\"new-key\" class=\"secret\">".len()..];
    let secret = rest[..rest.find('<').unwrap()].to_string();
    assert!(secret.starts_with("tgk_"), "{secret}");
    assert!(
        created.body.contains("data-copy=\"new-key\""),
        "a copy button"
    );
    // Published: the directory knows it; the list shows the preview, never the secret again.
    let hash = api.state.hasher.hash(&secret);
    let record = api.state.stores.keys.lookup(&hash).await.unwrap().unwrap();
    assert_eq!(record.org_id, org);
    assert_eq!(
        (
            record.limits.max_concurrency,
            record.limits.requests_per_minute
        ),
        (Some(3), None),
        "the key's own limits travel with its record"
    );
    let list = owner.get(&keys_path).await;
    assert!(
        list.body.contains("prod") && !list.body.contains(&secret),
        "{}",
        list.body
    );
    // A member: the list, no actions; a forged create or disable is refused.
    let mut member = member_of(&api, org, "mo@member.example").await;
    let seen = member.get(&keys_path).await;
    assert_eq!(seen.status, 200);
    assert!(
        seen.body.contains("prod")
            && !seen.body.contains("Create a key")
            && !seen.body.contains(">Disable<")
    );
    let member_csrf = seen.csrf();
    let key_id = {
        use sea_orm::EntityTrait;
        entities::customer_api_keys::Entity::find()
            .all(&api.state.db)
            .await
            .unwrap()[0]
            .id
    };
    let forged = member
        .post(
            &keys_path,
            &[("csrf", &member_csrf), ("name", "mine"), ("group_id", "1")],
            None,
        )
        .await;
    assert_eq!(forged.status, 403);
    let forged = member
        .post(
            &format!("{keys_path}/{key_id}/disable"),
            &[("csrf", &member_csrf)],
            None,
        )
        .await;
    assert_eq!(forged.status, 403);
    assert_eq!(api.count("customer_api_keys").await, 1);
    assert!(
        api.state.stores.keys.lookup(&hash).await.unwrap().is_some(),
        "still usable"
    );
    // Another organization's owner cannot touch it.
    let (mut stranger, other_org, _) = activate(&api, "console-h").await;
    let s_csrf = stranger
        .get(&format!("/console/orgs/{other_org}/keys"))
        .await
        .csrf();
    let across = stranger
        .post(
            &format!("/console/orgs/{other_org}/keys/{key_id}/disable"),
            &[("csrf", &s_csrf)],
            None,
        )
        .await;
    assert_eq!(across.status, 404);
    let across = stranger
        .post(
            &format!("/console/orgs/{org}/keys/{key_id}/disable"),
            &[("csrf", &s_csrf)],
            None,
        )
        .await;
    assert_eq!(across.status, 404);
    // The owner disables it: out of the directory at once, listed as disabled.
    let csrf = owner.get(&keys_path).await.csrf();
    let disabled = owner
        .post(
            &format!("{keys_path}/{key_id}/disable"),
            &[("csrf", &csrf)],
            None,
        )
        .await;
    assert_eq!(
        (disabled.status, disabled.location()),
        (303, keys_path.as_str())
    );
    assert!(api.state.stores.keys.lookup(&hash).await.unwrap().is_none());
    assert!(owner.get(&keys_path).await.body.contains(">disabled<"));
    assert!(api.count("audit_records").await >= 4);
}

/// The billing token page: an owner creates a token (shown once) that reads the billing API,
/// rotates it (the old one stops at once), revokes it; a member sees the status only and a forged
/// post of theirs changes nothing.
#[tokio::test]
async fn billing_tokens_are_created_rotated_and_revoked_by_managers_only() {
    let api = Api::start().await;
    let (mut owner, org, _) = activate(&api, "console-i").await;
    let path = format!("/console/orgs/{org}/billing-token");
    let secret_of = |page: &Page| {
        let at = page
            .body
            .find("id=\"new-token\" class=\"secret\">")
            .unwrap();
        let rest = &page.body[at + "id=\"new-token\" class=\"secret\">".len()..];
        rest[..rest.find('<').unwrap()].to_string()
    };
    let balance = |token: String| {
        let http = api.http.clone();
        let url = format!("{}/api/v1/organization/billing/balance", api.base);
        async move {
            http.get(url)
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let page = owner.get(&path).await;
    assert!(page.body.contains("No active billing token") && page.body.contains("Create token"));
    let csrf = page.csrf();
    let created = owner
        .post(&path, &[("csrf", &csrf), ("action", "create")], None)
        .await;
    assert_eq!(created.status, 200, "{}", created.body);
    let first = secret_of(&created);
    assert!(first.starts_with("tgb_"), "{first}");
    assert_eq!(balance(first.clone()).await, 200);
    let again = owner
        .post(&path, &[("csrf", &csrf), ("action", "create")], None)
        .await;
    assert_eq!(again.status, 409, "one active token at most");
    // A member: status only, a forged rotate refused.
    let mut member = member_of(&api, org, "mel@member.example").await;
    let seen = member.get(&path).await;
    assert!(seen.body.contains("Active token") && !seen.body.contains("Rotate token"));
    let forged = member
        .post(&path, &[("csrf", &seen.csrf()), ("action", "rotate")], None)
        .await;
    assert_eq!(forged.status, 403);
    assert_eq!(balance(first.clone()).await, 200, "unchanged");
    // Rotate: the old one stops at once; revoke: none works.
    let rotated = owner
        .post(&path, &[("csrf", &csrf), ("action", "rotate")], None)
        .await;
    assert_eq!(rotated.status, 200);
    let second = secret_of(&rotated);
    assert_eq!(
        (balance(first).await, balance(second.clone()).await),
        (401, 200)
    );
    let revoked = owner
        .post(&path, &[("csrf", &csrf), ("action", "revoke")], None)
        .await;
    assert_eq!(revoked.status, 200);
    assert!(revoked.body.contains("No active billing token"));
    assert_eq!(balance(second).await, 401);
}

#[tokio::test]
async fn owners_invite_change_roles_and_remove_members_and_one_owner_always_remains() {
    let api = Api::start().await;
    let (mut owner, org, owner_email) = activate(&api, "console-m").await;
    let path = format!("/console/orgs/{org}/members");
    let ids = |page: &Page| {
        let marker = format!("action=\"/console/orgs/{org}/members/");
        let mut ids: Vec<String> = page
            .body
            .match_indices(&marker)
            .map(|(at, _)| {
                let rest = &page.body[at + marker.len()..];
                rest[..rest.find('"').unwrap()].to_string()
            })
            .collect();
        ids.dedup();
        ids
    };
    let page = owner.get(&path).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains(&format!("{owner_email} (you)"))
            && page.body.contains("Send invitation")
    );
    let csrf = page.csrf();
    let owner_id = ids(&page)[0].clone();
    // Bad inputs: a clear message, nothing issued.
    let tokens = api.count("console_tokens").await;
    for (email, role, says) in [
        ("not-an-address", "member", "valid email"),
        ("ann@team.example", "emperor", "Choose a role"),
    ] {
        let refused = owner
            .post(
                &path,
                &[("csrf", &csrf), ("email", email), ("role", role)],
                None,
            )
            .await;
        assert_eq!(refused.status, 400, "{email}");
        assert!(refused.body.contains(says), "{}", refused.body);
    }
    assert_eq!(api.count("console_tokens").await, tokens, "nothing issued");
    // The sole owner cannot demote or remove themself.
    for form in [
        vec![
            ("csrf", csrf.as_str()),
            ("action", "role"),
            ("role", "member"),
        ],
        vec![("csrf", csrf.as_str()), ("action", "remove")],
    ] {
        let refused = owner.post(&format!("{path}/{owner_id}"), &form, None).await;
        assert_eq!(refused.status, 409);
        assert!(
            refused.body.contains("at least one owner"),
            "{}",
            refused.body
        );
    }
    // Invite an administrator: the link is shown once and listed as open until used.
    let invited = owner
        .post(
            &path,
            &[
                ("csrf", &csrf),
                ("email", " Ann@Team.example "),
                ("role", "administrator"),
            ],
            None,
        )
        .await;
    assert_eq!(invited.status, 200, "{}", invited.body);
    assert!(invited.body.contains("Invitations not accepted yet"));
    let at = invited.body.find("/console/join/").unwrap();
    let rest = &invited.body[at..];
    let join = rest[..rest.find('<').unwrap()].to_string();
    let mut ann = Browser::new(&api);
    let c = ann.get(&join).await.csrf();
    let joined = ann
        .with_code(
            &api,
            &join,
            &[
                ("csrf", &c),
                ("email", "ann@team.example"),
                ("password", PASSWORD),
            ],
            "ann@team.example",
        )
        .await;
    assert_eq!(joined.status, 303, "{}", joined.body);
    let seen = ann.get(&path).await;
    assert!(seen.body.contains("administrator") && !seen.body.contains("Send invitation"));
    assert!(
        !seen.body.contains("Invitations not accepted yet"),
        "the link is spent"
    );
    let ann_id = ids(&owner.get(&path).await)[1].clone();
    // An administrator's forged posts are refused and change nothing; no audit page either.
    let forged = ann
        .post(
            &path,
            &[
                ("csrf", &seen.csrf()),
                ("email", "eve@x.example"),
                ("role", "owner"),
            ],
            None,
        )
        .await;
    assert_eq!(forged.status, 403);
    let forged = ann
        .post(
            &format!("{path}/{ann_id}"),
            &[
                ("csrf", &seen.csrf()),
                ("action", "role"),
                ("role", "owner"),
            ],
            None,
        )
        .await;
    assert_eq!(forged.status, 403);
    assert_eq!(
        ann.get(&format!("/console/orgs/{org}/audit")).await.status,
        403
    );
    // A post without the session's token is refused.
    let no_csrf = owner
        .post(&format!("{path}/{ann_id}"), &[("action", "remove")], None)
        .await;
    assert_eq!(no_csrf.status, 403);
    // Make Ann owner; then the first owner may step down to member.
    let promoted = owner
        .post(
            &format!("{path}/{ann_id}"),
            &[("csrf", &csrf), ("action", "role"), ("role", "owner")],
            None,
        )
        .await;
    assert_eq!(promoted.status, 303, "{}", promoted.body);
    let stepped = owner
        .post(
            &format!("{path}/{owner_id}"),
            &[("csrf", &csrf), ("action", "role"), ("role", "member")],
            None,
        )
        .await;
    assert_eq!(stepped.status, 303);
    let now_member = owner.get(&path).await;
    assert!(!now_member.body.contains("Send invitation") && !now_member.body.contains("Remove"));
    // Ann reads the audit log, removes the former owner (whose pages are gone at once) and, as
    // the last owner, cannot remove herself.
    let audit = ann.get(&format!("/console/orgs/{org}/audit")).await;
    assert_eq!(audit.status, 200);
    for what in ["member invited", "member role changed", "ann@team.example"] {
        assert!(audit.body.contains(what), "{what}");
    }
    let c = ann.get(&path).await.csrf();
    let removed = ann
        .post(
            &format!("{path}/{owner_id}"),
            &[("csrf", &c), ("action", "remove")],
            None,
        )
        .await;
    assert_eq!(removed.status, 303);
    assert_eq!(owner.get(&format!("/console/orgs/{org}")).await.status, 404);
    let last = ann
        .post(
            &format!("{path}/{ann_id}"),
            &[("csrf", &c), ("action", "remove")],
            None,
        )
        .await;
    assert_eq!(last.status, 409);
    assert!(
        ann.get(&format!("/console/orgs/{org}/audit"))
            .await
            .body
            .contains("member removed")
    );
    // A member id that is not this organization's is not found.
    let other = ann
        .post(
            &format!("{path}/999999"),
            &[("csrf", &c), ("action", "remove")],
            None,
        )
        .await;
    assert_eq!(other.status, 404);
    // A real membership of another organization, forged into this organization's URL: not
    // found, and nothing changes there.
    let (_, elsewhere, _) = activate(&api, "console-m2").await;
    let theirs = {
        use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
        entities::org_members::Entity::find()
            .filter(entities::org_members::Column::OrganizationId.eq(elsewhere))
            .one(&api.state.db)
            .await
            .unwrap()
            .unwrap()
    };
    for form in [
        vec![("csrf", c.as_str()), ("action", "remove")],
        vec![("csrf", c.as_str()), ("action", "role"), ("role", "member")],
    ] {
        let forged = ann
            .post(&format!("{path}/{}", theirs.id), &form, None)
            .await;
        assert_eq!(forged.status, 404, "{form:?}");
    }
    let after = {
        use sea_orm::EntityTrait;
        entities::org_members::Entity::find_by_id(theirs.id)
            .one(&api.state.db)
            .await
            .unwrap()
    };
    assert_eq!(
        after,
        Some(theirs),
        "the other organization's owner is untouched"
    );
}

/// Sends `requests` one after another on one HTTP/1.1 connection and returns each answer's
/// status and head; every answer must arrive on that same connection.
async fn on_one_connection(api: &Api, requests: &[String]) -> Vec<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = api.base.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut answers = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    for request in requests {
        socket.write_all(request.as_bytes()).await.unwrap();
        let head_end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let mut chunk = [0u8; 8192];
            let n =
                tokio::time::timeout(std::time::Duration::from_secs(5), socket.read(&mut chunk))
                    .await
                    .expect("an answer on the same connection")
                    .unwrap();
            assert!(n > 0, "the connection was closed after {answers:?}");
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let status: u16 = head[9..12].parse().unwrap();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map(|v| v.trim().parse().unwrap())
            .expect("a sized answer");
        while buf.len() < head_end + length {
            let mut chunk = [0u8; 8192];
            let n = socket.read(&mut chunk).await.unwrap();
            assert!(n > 0);
            buf.extend_from_slice(&chunk[..n]);
        }
        buf.drain(..head_end + length);
        answers.push((status, head));
    }
    answers
}

/// Console refusals (forged forms, pages of another organization, a bad query, an unknown page,
/// a signed-out visit) leave the connection usable: every answer arrives on one connection,
/// none says `Connection: close`.
#[tokio::test]
async fn console_refusals_leave_the_connection_usable() {
    let api = Api::start().await;
    let (owner, org, _) = activate(&api, "console-k").await;
    let (_, other, _) = activate(&api, "console-k2").await;
    let cookie = owner.cookie_header();
    let host = api.base.trim_start_matches("http://").to_string();
    let get =
        |path: &str| format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\n\r\n");
    let post = |path: &str, body: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\nOrigin: {}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
            api.base,
            body.len()
        )
    };
    let answers = on_one_connection(
        &api,
        &[
            post("/console/sign-in", "email=a%40b.example&password=x"),
            post(
                &format!("/console/orgs/{org}/keys"),
                "csrf=forged&name=x&group_id=1",
            ),
            post(
                &format!("/console/orgs/{org}/members/999999"),
                "csrf=forged&action=remove",
            ),
            get(&format!("/console/orgs/{other}")),
            get(&format!("/console/orgs/{org}/usage?from=yesterday")),
            get(&format!("/console/orgs/{other}/usage.csv")),
            get("/console/nope"),
            format!("GET /console/orgs/{org} HTTP/1.1\r\nHost: {host}\r\n\r\n"),
            get(&format!("/console/orgs/{org}/usage")),
        ],
    )
    .await;
    let statuses: Vec<u16> = answers.iter().map(|(s, _)| *s).collect();
    assert_eq!(statuses, vec![403, 403, 403, 404, 400, 404, 404, 303, 200]);
    for (status, head) in &answers {
        assert!(!head.contains("connection: close"), "{status}: {head}");
    }
    assert_eq!(api.count("customer_api_keys").await, 0, "nothing created");
}

/// The reset links mailed so far (the mail is sent just after the answer: waits up to 5 s for
/// `want` of them).
async fn reset_links(api: &Api, want: usize) -> Vec<String> {
    for _ in 0..100 {
        let mut links: Vec<String> = std::fs::read_dir(&api.outbox)
            .map(|d| {
                d.filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
                    .map(|m| m.replace("=\r\n", "").replace("=\n", ""))
                    .filter_map(|m| {
                        let at = m.find("/console/reset/")?;
                        let rest = &m[at..];
                        let end = rest
                            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '/' || c == '-'))
                            .unwrap_or(rest.len());
                        Some(rest[..end].to_string())
                    })
                    .collect()
            })
            .unwrap_or_default();
        if links.len() >= want {
            links.sort();
            return links;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("fewer than {want} reset mails");
}

#[tokio::test]
async fn a_mailed_link_resets_the_password_once_and_signs_every_session_out() {
    let api = Api::start().await;
    let (mut owner, _org, email) = activate(&api, "console-r").await;
    assert_eq!(owner.get("/console/").await.status, 200);
    let sign_in = Browser::new(&api).get("/console/sign-in").await;
    assert!(sign_in.body.contains("href=\"/console/reset\""));
    let mut anon = Browser::new(&api);
    let form = anon.get("/console/reset").await;
    assert_eq!(form.status, 200);
    let csrf = form.csrf();
    // The same answer for an address with and without an account; only the account gets mail.
    let unknown = anon
        .post(
            "/console/reset",
            &[("csrf", &csrf), ("email", "nobody@nowhere.example")],
            None,
        )
        .await;
    let known = anon
        .post(
            "/console/reset",
            &[("csrf", &csrf), ("email", &email.to_uppercase())],
            None,
        )
        .await;
    assert_eq!((unknown.status, known.status), (200, 200));
    assert_eq!(unknown.body, known.body);
    assert!(known.body.contains("Check your mail"));
    let links = reset_links(&api, 1).await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(
        reset_links(&api, 1).await.len(),
        1,
        "no mail for an unknown address"
    );
    let link = links[0].clone();
    // Bad inputs: a clear answer, nothing changes.
    let bad = anon
        .post(
            "/console/reset",
            &[("csrf", &csrf), ("email", "not-an-address")],
            None,
        )
        .await;
    assert_eq!(bad.status, 400);
    let forged = anon
        .post("/console/reset", &[("email", email.as_str())], None)
        .await;
    assert_eq!(forged.status, 403);
    let page = anon.get(&link).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("New password"));
    let c = page.csrf();
    let short = anon
        .post(&link, &[("csrf", &c), ("password", "short")], None)
        .await;
    assert_eq!(short.status, 400);
    assert!(short.body.contains("12 to 128"));
    let c = short.csrf();
    let no_token = anon
        .post(&link, &[("password", "a brand new passphrase")], None)
        .await;
    assert_eq!(no_token.status, 403);
    assert_eq!(
        owner.get("/console/").await.status,
        200,
        "nothing changed yet"
    );
    // The new password: every session ends, the old password stops, the link is spent.
    let done = anon
        .post(
            &link,
            &[("csrf", &c), ("password", "a brand new passphrase")],
            None,
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(done.body.contains("Password changed"));
    let after = owner.get("/console/").await;
    assert_eq!(after.status, 303);
    assert!(after.location().starts_with("/console/sign-in"));
    assert_eq!(
        Browser::new(&api).sign_in(&email, PASSWORD).await.status,
        401
    );
    assert_eq!(
        Browser::new(&api)
            .sign_in(&email, "a brand new passphrase")
            .await
            .status,
        303
    );
    assert_eq!(anon.get(&link).await.status, 410);
    let c = anon.get("/console/reset").await.csrf();
    let again = anon
        .post(
            &link,
            &[("csrf", &c), ("password", "yet another passphrase")],
            None,
        )
        .await;
    assert_eq!(again.status, 410, "single use");
    assert!(api.count("audit_records").await >= 2);
    // A link older than an hour is expired.
    anon.post(
        "/console/reset",
        &[("csrf", &c), ("email", email.as_str())],
        None,
    )
    .await;
    let fresh = reset_links(&api, 2)
        .await
        .into_iter()
        .find(|l| *l != link)
        .unwrap();
    api.state
        .clock
        .set(Some(chrono::Utc::now() + chrono::Duration::minutes(61)));
    assert_eq!(anon.get(&fresh).await.status, 410);
    api.state.clock.set(None);
    assert_eq!(anon.get(&fresh).await.status, 200);
}

/// One settled call of `key` in organization `org` at `at` (RFC 3339), through the usage stream.
pub(super) async fn spend(
    api: &Api,
    org: i64,
    key: i64,
    model: &str,
    at: &str,
    cost: i64,
    images: u64,
) {
    let started = chrono::DateTime::parse_from_rfc3339(at).unwrap();
    let n = api.idem.fetch_add(1, Ordering::Relaxed);
    let event = opstate::UsageEvent {
        request_id: format!("usage-{n}"),
        key_id: key,
        org_id: org,
        group_id: 1,
        route: "chat_completions".into(),
        model_requested: model.into(),
        model_served: model.into(),
        account_id: "a".into(),
        input_tokens: 100,
        output_tokens: 10,
        cached_tokens: 20,
        cache_write_tokens: 0,
        cache_write_1h_tokens: 0,
        measurement: opstate::Measurement::Exact,
        status: 200,
        stream: false,
        started_at_ms: u64::try_from(started.timestamp_millis()).unwrap(),
        latency_ms: 1,
        ttfb_ms: None,
        attempts: 1,
        cost_nanos: nano(cost),
        charged_nanos: nano(cost),
        excess_nanos: nano(0),
        hold_nanos: nano(cost),
        project: None,
        workflow: None,
        audio_seconds: 0,
        images,
        video_seconds: 0,
        retail_rate: None,
        wholesale_rate: None,
        resent: false,
        supplier: Default::default(),
        batch: None,
    };
    api.state.stores.usage.append(&event).await.unwrap();
}

/// A CSV figure (a decimal) and the billing API's (a JSON number) are the same amount.
fn same(csv: &str, json: &Value) -> bool {
    csv.parse::<f64>()
        .ok()
        .is_some_and(|c| Some(c) == json.as_f64())
}

/// The rows of a CSV answer (header first), split on commas outside quotes.
pub(super) fn csv_rows(body: &str) -> Vec<Vec<String>> {
    body.split("\r\n")
        .filter(|l| !l.is_empty())
        .map(|line| {
            let mut fields = vec![String::new()];
            let mut quoted = false;
            for c in line.chars() {
                match c {
                    '"' => quoted = !quoted,
                    ',' if !quoted => fields.push(String::new()),
                    c => fields.last_mut().unwrap().push(c),
                }
            }
            fields
        })
        .collect()
}

/// The usage page and its CSV: by model, key and group, by day and by hour, with the billing
/// API's figures for the same day; other organizations' usage never shows; a bad window is a 400
/// naming its field; a member reads it; another organization's usage is a 404.
#[tokio::test]
async fn usage_page_and_csv_show_the_billing_api_figures() {
    let api = Api::start().await;
    let (mut owner, org, _) = activate(&api, "console-u").await;
    let (_, other_org, _) = activate(&api, "console-u2").await;
    let keys_path = format!("/console/orgs/{org}/keys");
    let csrf = owner.get(&keys_path).await.csrf();
    for name in ["web", "=batch"] {
        let created = owner
            .post(
                &keys_path,
                &[("csrf", &csrf), ("name", name), ("group_id", "1")],
                None,
            )
            .await;
        assert_eq!(created.status, 200, "{}", created.body);
    }
    let keys = {
        use sea_orm::{EntityTrait, QueryOrder};
        entities::customer_api_keys::Entity::find()
            .order_by_asc(entities::customer_api_keys::Column::Id)
            .all(&api.state.db)
            .await
            .unwrap()
    };
    let (web, batch) = (keys[0].id, keys[1].id);
    spend(
        &api,
        org,
        web,
        "gpt-4o-mini",
        "2026-03-04T10:15:00Z",
        1_500,
        0,
    )
    .await;
    spend(
        &api,
        org,
        web,
        "gpt-4o-mini",
        "2026-03-04T10:45:00Z",
        2_500,
        0,
    )
    .await;
    spend(
        &api,
        org,
        web,
        "gpt-4o",
        "2026-03-04T15:00:00Z",
        123_456_789,
        0,
    )
    .await;
    spend(
        &api,
        org,
        batch,
        "gpt-4o-mini",
        "2026-03-04T23:59:59Z",
        7,
        2,
    )
    .await;
    spend(
        &api,
        org,
        batch,
        "gpt-4o",
        "2026-03-05T00:00:00Z",
        1_000_000_000,
        0,
    )
    .await;
    spend(
        &api,
        other_org,
        999,
        "other-model",
        "2026-03-04T10:00:00Z",
        42,
        0,
    )
    .await;
    admin_api::workers::settler::drain_once(&api.state, "t")
        .await
        .unwrap();

    let token = api.billing_token(org).await;
    let billing: Value = api
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
    let day = &billing["data"];
    assert_eq!(day["totals"]["requests"], 4, "{billing}");

    // By model, by day: the day's rows equal the billing API's models.
    let path = format!("/console/orgs/{org}/usage");
    let q = "?granularity=day&from=2026-03-04&to=2026-03-05";
    let csv = owner.get(&format!("{path}.csv{q}&by=model")).await;
    assert_eq!(csv.status, 200, "{}", csv.body);
    assert_eq!(csv.header("content-type"), "text/csv; charset=utf-8");
    assert!(
        csv.header("content-disposition").contains(&format!(
            "usage-org-{org}-2026-03-04-2026-03-05-by-day-model.csv"
        )),
        "{}",
        csv.header("content-disposition")
    );
    let rows = csv_rows(&csv.body);
    assert_eq!(
        rows[0].join(","),
        "period_start,period_end,model,requests,input_tokens,output_tokens,cached_tokens,cache_write_tokens,images,video_seconds,cost_usd"
    );
    let first_day: Vec<_> = rows[1..]
        .iter()
        .filter(|r| r[0] == "2026-03-04T00:00:00Z")
        .collect();
    let models = day["models"].as_array().unwrap();
    assert_eq!(first_day.len(), models.len(), "{}", csv.body);
    for m in models {
        let row = first_day
            .iter()
            .find(|r| r[2] == m["model"].as_str().unwrap())
            .unwrap();
        assert_eq!(row[1], "2026-03-05T00:00:00Z");
        for (i, field) in [
            (3, "requests"),
            (4, "input_tokens"),
            (5, "output_tokens"),
            (6, "cache_tokens"),
            (8, "images"),
            (10, "cost_usd"),
        ] {
            assert!(same(&row[i], &m[field]), "{field} of {m}: {row:?}");
        }
    }
    assert!(
        rows.iter()
            .any(|r| r[0] == "2026-03-05T00:00:00Z" && r[2] == "gpt-4o" && r[10] == "1"),
        "the next day has its own row: {}",
        csv.body
    );
    assert!(
        !csv.body.contains("other-model"),
        "another organization's usage"
    );

    // By key: the billing API's api_keys, with the key's name; a name that looks like a formula
    // is defused.
    let csv = owner.get(&format!("{path}.csv{q}&by=key")).await;
    let rows = csv_rows(&csv.body);
    assert_eq!(rows[0][2..4].join(","), "api_key_id,api_key");
    for k in day["api_keys"].as_array().unwrap() {
        let id = k["api_key_id"].to_string();
        let row = rows
            .iter()
            .find(|r| r[0] == "2026-03-04T00:00:00Z" && r[2] == id)
            .unwrap();
        assert!(same(&row[4], &k["requests"]), "{k} {row:?}");
        assert!(same(&row[11], &k["cost_usd"]), "{k} {row:?}");
    }
    let batch_row = rows.iter().find(|r| r[2] == batch.to_string()).unwrap();
    assert!(batch_row[3].starts_with("'=batch ("), "{batch_row:?}");

    // By group: every key is in group 1 ("Standard"): one line, the day's totals.
    let csv = owner.get(&format!("{path}.csv{q}&by=group")).await;
    let rows = csv_rows(&csv.body);
    let row = rows
        .iter()
        .find(|r| r[0] == "2026-03-04T00:00:00Z")
        .unwrap();
    assert_eq!((row[2].as_str(), row[3].as_str()), ("1", "Standard"));
    assert!(same(&row[4], &day["totals"]["requests"]));
    assert!(same(&row[11], &day["totals"]["cost_usd"]));

    // By hour: the day's 10:00 hour holds two calls of one key and model.
    let csv = owner
        .get(&format!(
            "{path}.csv?granularity=hour&from=2026-03-04&to=2026-03-04&by=model"
        ))
        .await;
    let rows = csv_rows(&csv.body);
    let ten: Vec<_> = rows
        .iter()
        .filter(|r| r[0] == "2026-03-04T10:00:00Z")
        .collect();
    assert_eq!(ten.len(), 1, "{}", csv.body);
    assert_eq!(
        (ten[0][1].as_str(), ten[0][3].as_str(), ten[0][10].as_str()),
        ("2026-03-04T11:00:00Z", "2", "0.000004")
    );
    assert_eq!(rows.len(), 4, "three hours with usage: {}", csv.body);

    // The page: the window's total, one line per model, a column per day, a CSV link.
    let page = owner.get(&format!("{path}{q}&by=model")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("aria-current=\"page\">Usage</a>"));
    assert!(
        page.body
            .contains(
                "data-figure=\"spend\"><data value=\"1.123460796\" title=\"1.123460796 USD\">1.12</data> USD</dd>"
            ),
        "{}",
        page.body
    );
    assert!(page.body.contains("data-figure=\"requests\">5</dd>"));
    assert_eq!(page.body.matches("<g class=\"col\">").count(), 2);
    assert!(page.body.contains(&format!(
        "href=\"/console/orgs/{org}/usage.csv?granularity=day&#38;from=2026-03-04&#38;to=2026-03-05&#38;by=model\""
    )));
    for model in ["gpt-4o-mini", "gpt-4o"] {
        assert!(
            page.body.contains(&format!("</span>{model}</th>")),
            "{model}"
        );
    }
    let hourly = owner
        .get(&format!(
            "{path}?granularity=hour&from=2026-03-04&to=2026-03-04"
        ))
        .await;
    assert_eq!(hourly.status, 200);
    assert_eq!(hourly.body.matches("<g class=\"col\">").count(), 24);
    assert!(hourly.body.contains("2026-03-04 15:00"));
    // The default window: the last 30 days by day.
    let default = owner.get(&path).await;
    assert_eq!(default.status, 200);
    assert_eq!(default.body.matches("<g class=\"col\">").count(), 30);

    // Refusals name their field and change nothing.
    for (q, field) in [
        ("?granularity=minute", "usage-granularity"),
        ("?by=account", "usage-by"),
        ("?from=yesterday", "usage-from"),
        ("?from=2026-03-05&to=2026-03-04", "usage-to"),
        ("?from=2025-01-01&to=2026-03-04", "usage-from"),
        (
            "?granularity=hour&from=2026-03-01&to=2026-03-08",
            "usage-from",
        ),
    ] {
        let page = owner.get(&format!("{path}{q}")).await;
        assert_eq!(page.status, 400, "{q}");
        assert!(page.body.contains("role=\"alert\""), "{q}");
        let at = page.body.find(&format!("id=\"{field}\"")).unwrap();
        let tag = &page.body[at..at + page.body[at..].find('>').unwrap()];
        assert!(tag.contains("aria-invalid=\"true\""), "{q}: {tag}");
        let csv = owner.get(&format!("{path}.csv{q}")).await;
        assert_eq!(csv.status, 400, "{q}");
    }

    // A member reads the same figures.
    let mut mina = member_of(&api, org, "mina@member.example").await;
    let seen = mina
        .get(&format!(
            "{path}.csv?granularity=hour&from=2026-03-04&to=2026-03-04&by=model"
        ))
        .await;
    assert_eq!((seen.status, seen.body.as_str()), (200, csv.body.as_str()));

    // Another organization's usage: 404, page and CSV; signed out: the sign-in page.
    for p in [
        format!("/console/orgs/{other_org}/usage"),
        format!("/console/orgs/{other_org}/usage.csv"),
    ] {
        assert_eq!(owner.get(&p).await.status, 404, "{p}");
        assert_eq!(Browser::new(&api).get(&p).await.status, 303, "{p}");
    }
}
