//! The security suite generated from the router (issue 42): every console and invitation route
//! that changes state, as `admin_api::http::state_changing_routes()` lists it while building the
//! router (a new route cannot be missed), is posted
//! - without a session, without or with a wrong CSRF token, from a cross-site `Origin`;
//! - by every role below the ones its gate names, by a signed-in outsider, by the owner of a
//!   partner the operator made a `viewer`;
//! - with another tenant's ids (the whole path, then only the nested id);
//!
//! and each answer must be a refusal (a redirect to sign in, 403 or 404; 400 for another
//! tenant's nested id) with every table of people, money and keys unchanged (compared row by
//! row). Then the same post by a role the gate admits, with a valid form, must get through (200
//! or 303): the refusals are the gate's, not a bad form's. One fresh deployment per route.

use super::console::{Browser, PASSWORD, SESSION};
use super::*;
use admin_api::http::table::{Gate, Route};
use admin_api::services::memberships;
use admin_api::services::people;
use admin_api::services::sessions;
use std::collections::HashMap;

const ORG_ROLES: [&str; 3] = ["owner", "administrator", "member"];
const PARTNER_ROLES: [&str; 4] = ["owner", "admin", "operator", "viewer"];

/// A signed-in person: their browser (with the session cookie) and the session's CSRF token.
struct Person {
    b: Browser,
    csrf: String,
}

struct Fx {
    org: (i64, i64),
    partner: (i64, i64),
    viewer_partner: i64,
    customer: (i64, i64),
    pending_customer: i64,
    key: (i64, i64),
    org_member: (i64, i64),
    partner_member: (i64, i64),
    org_invite: (i64, i64),
    partner_invite: (i64, i64),
    token: (i64, i64),
    webhook: (i64, i64),
    people: HashMap<String, Person>,
}

async fn person(
    api: &Api,
    hash: &str,
    email: &str,
    org: Option<(i64, &str)>,
    partner: Option<(i64, &str)>,
) -> (i64, Person) {
    let now = chrono::Utc::now();
    let user = people::insert_user(&api.state.db, email, hash.to_string(), Some(now), now)
        .await
        .unwrap();
    if let Some((o, role)) = org {
        memberships::join_org(&api.state.db, o, user.id, role, now)
            .await
            .unwrap();
    }
    if let Some((p, role)) = partner {
        memberships::join_partner(&api.state.db, p, user.id, role, now)
            .await
            .unwrap();
    }
    let (cookie, session) =
        sessions::open_session(&api.state.db, user.id, None, now, api.state.lifetimes())
            .await
            .unwrap();
    let mut b = Browser::new(api);
    b.cookies.insert(SESSION.into(), cookie);
    (
        user.id,
        Person {
            b,
            csrf: session.csrf,
        },
    )
}

async fn member_row(api: &Api, org: Option<i64>, partner: Option<i64>, user: i64) -> i64 {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    match (org, partner) {
        (Some(o), _) => {
            entities::org_members::Entity::find()
                .filter(entities::org_members::Column::OrganizationId.eq(o))
                .filter(entities::org_members::Column::UserId.eq(user))
                .one(&api.state.db)
                .await
                .unwrap()
                .unwrap()
                .id
        }
        (_, Some(p)) => {
            entities::partner_members::Entity::find()
                .filter(entities::partner_members::Column::PartnerId.eq(p))
                .filter(entities::partner_members::Column::UserId.eq(user))
                .one(&api.state.db)
                .await
                .unwrap()
                .unwrap()
                .id
        }
        _ => unreachable!(),
    }
}

async fn token_of(api: &Api, partner: i64) -> i64 {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    entities::partner_tokens::Entity::find()
        .filter(entities::partner_tokens::Column::PartnerId.eq(partner))
        .one(&api.state.db)
        .await
        .unwrap()
        .unwrap()
        .id
}

async fn key_of(api: &Api, p: &Partner, customer: i64) -> i64 {
    let (s, v) = api
        .write(
            p,
            Method::POST,
            &format!("/customers/{customer}/api-keys"),
            Some(&json!({"name": "k", "group_id": 1})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    v["data"]["api_key_id"].as_i64().unwrap()
}

async fn webhook_of(api: &Api, p: &Partner) -> i64 {
    let (s, v) = api
        .write(
            p,
            Method::POST,
            "/webhooks",
            Some(&json!({"url": "https://hooks.example.com/sec"})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    v["data"]["id"].as_i64().unwrap()
}

async fn invite(api: &Api, purpose: &str, org: Option<i64>, partner: Option<i64>) -> i64 {
    use sea_orm::{EntityTrait, QueryOrder};
    memberships::issue_token(
        &api.state.db,
        &api.state,
        purpose,
        "later@sec.example",
        org,
        partner,
        Some("viewer"),
        None,
    )
    .await
    .unwrap();
    entities::console_tokens::Entity::find()
        .order_by_desc(entities::console_tokens::Column::Id)
        .one(&api.state.db)
        .await
        .unwrap()
        .unwrap()
        .id
}

async fn fixture(api: &Api) -> Fx {
    let hash = people::new_password_hash(PASSWORD).await.unwrap();
    let p = api.owner("100").await;
    let q = api.owner("100").await;
    let v = api.partner("viewer", &["partner:read"], "10", "1.0").await;
    let (cust_o, o) = api.active_customer(&p, "sec-own", 20.0, 1.0).await;
    let (cust_o2, o2) = api.active_customer(&q, "sec-other", 20.0, 1.0).await;
    let (s, pending) = api.create(&p, "sec-pending", 1.0, 1.0).await;
    assert_eq!(s, 200);
    let key = (
        key_of(api, &p, cust_o).await,
        key_of(api, &q, cust_o2).await,
    );
    let mut people = HashMap::new();
    let mut users = HashMap::new();
    for role in ORG_ROLES {
        let email = format!("org-{role}@sec.example");
        let (id, who) = person(api, &hash, &email, Some((o, role)), None).await;
        users.insert(format!("org:{role}"), id);
        people.insert(format!("org:{role}"), who);
    }
    for role in PARTNER_ROLES {
        let email = format!("partner-{role}@sec.example");
        let (id, who) = person(api, &hash, &email, None, Some((p.id, role))).await;
        users.insert(format!("partner:{role}"), id);
        people.insert(format!("partner:{role}"), who);
    }
    let (_, who) = person(
        api,
        &hash,
        "v-owner@sec.example",
        None,
        Some((v.id, "owner")),
    )
    .await;
    people.insert("viewer-partner:owner".into(), who);
    let (_, who) = person(api, &hash, "outsider@sec.example", None, None).await;
    people.insert("outsider".into(), who);
    let (o2_owner, _) = person(api, &hash, "o2@sec.example", Some((o2, "owner")), None).await;
    let (q_owner, _) = person(api, &hash, "q@sec.example", None, Some((q.id, "owner"))).await;
    Fx {
        org: (o, o2),
        partner: (p.id, q.id),
        viewer_partner: v.id,
        customer: (cust_o, cust_o2),
        pending_customer: pending["data"]["customer"]["id"].as_i64().unwrap(),
        key,
        org_member: (
            member_row(api, Some(o), None, users["org:member"]).await,
            member_row(api, Some(o2), None, o2_owner).await,
        ),
        partner_member: (
            member_row(api, None, Some(p.id), users["partner:viewer"]).await,
            member_row(api, None, Some(q.id), q_owner).await,
        ),
        org_invite: (
            invite(api, "org_invite", Some(o), None).await,
            invite(api, "org_invite", Some(o2), None).await,
        ),
        partner_invite: (
            invite(api, "partner_invite", None, Some(p.id)).await,
            invite(api, "partner_invite", None, Some(q.id)).await,
        ),
        token: (token_of(api, p.id).await, token_of(api, q.id).await),
        webhook: (webhook_of(api, &p).await, webhook_of(api, &q).await),
        people,
    }
}

/// Which tenant each part of a path names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ids {
    Own,
    /// Another tenant's, throughout.
    Other,
    /// Our own organization or partner, another tenant's nested id.
    OtherNested,
    /// The viewer partner's, nested ids our own.
    ViewerPartner,
}

fn fill(path: &str, fx: &Fx, ids: Ids) -> String {
    let pick = |pair: (i64, i64), top: bool| {
        let other = match ids {
            Ids::Own | Ids::ViewerPartner => false,
            Ids::Other => true,
            Ids::OtherNested => !top,
        };
        if other { pair.1 } else { pair.0 }
    };
    let org_route = path.starts_with("/console/orgs/");
    let partner = if ids == Ids::ViewerPartner {
        fx.viewer_partner
    } else {
        pick(fx.partner, true)
    };
    let customer = if path.ends_with("/invitation") && ids != Ids::Other && ids != Ids::OtherNested
    {
        fx.pending_customer
    } else {
        pick(fx.customer, false)
    };
    let member = pick(
        if org_route {
            fx.org_member
        } else {
            fx.partner_member
        },
        false,
    );
    let invite = pick(
        if org_route {
            fx.org_invite
        } else {
            fx.partner_invite
        },
        false,
    );
    path.replace("{org}", &pick(fx.org, true).to_string())
        .replace("{partner}", &partner.to_string())
        .replace("{customer}", &customer.to_string())
        .replace("{key}", &pick(fx.key, false).to_string())
        .replace("{member}", &member.to_string())
        .replace("{invite}", &invite.to_string())
        .replace("{token}", &pick(fx.token, false).to_string())
        .replace("{webhook}", &pick(fx.webhook, false).to_string())
}

/// A form the gate's admitted roles may post with success.
fn form(path: &str, fx: &Fx, ids: Ids) -> Vec<(&'static str, String)> {
    let s = |v: &str| v.to_string();
    let key = if ids == Ids::Own { fx.key.0 } else { fx.key.1 };
    let tail = path.rsplit('/').next().unwrap();
    match tail {
        "alert" => vec![("threshold_usd", s("5"))],
        "keys" if path.starts_with("/console/orgs/") => {
            vec![("name", s("sec key")), ("group_id", s("1"))]
        }
        "keys" => vec![("name", s("sec key")), ("group_id", s("1"))],
        "disable" if path.starts_with("/console/orgs/") => vec![],
        "disable" => vec![("key_id", key.to_string())],
        "billing-token" => vec![("action", s("create"))],
        "members" => vec![("email", s("new@sec.example")), ("role", s("member"))],
        "team" => vec![("email", s("new@sec.example")), ("role", s("viewer"))],
        "funding" => vec![("amount_usd", s("10"))],
        "recharge" => vec![
            ("action", s("set")),
            ("below_usd", s("5")),
            ("amount_usd", s("20")),
        ],
        "customers" => vec![
            ("name", s("Sec Co")),
            ("external_id", s("sec-new")),
            ("contact_email", s("boss@secco.example")),
            ("initial_allocation_usd", s("1")),
            ("retail_rate_multiplier", s("1")),
        ],
        "invitation" => vec![("action", s("reissue"))],
        "allocations" => vec![("direction", s("increase")), ("amount_usd", s("1"))],
        "rates" => vec![("group_id", s("1")), ("retail_rate_multiplier", s("1.5"))],
        "automatic-allocation" => vec![
            ("action", s("set")),
            ("below_usd", s("2")),
            ("amount_usd", s("3")),
            ("monthly_cap_usd", s("30")),
        ],
        "tokens" => vec![("scope", s("partner:read"))],
        "webhooks" => vec![
            ("url", s("https://hooks.example.com/new")),
            ("events", s("statement.ready")),
        ],
        _ if path.contains("/webhooks/") => vec![("action", s("disable"))],
        _ if path.contains("/tokens/") => vec![("action", s("rotate"))],
        _ if path.contains("/invitations/") => vec![],
        _ if path.contains("/members/") => {
            vec![("action", s("role")), ("role", s("administrator"))]
        }
        _ if path.contains("/team/") => vec![("action", s("role")), ("role", s("operator"))],
        "sign-out" | "sign-out-everywhere" => vec![],
        "password" if path.starts_with("/console/account") => vec![
            ("current_password", s(PASSWORD)),
            ("new_password", s("another long pass phrase")),
        ],
        "two-factor" => vec![("action", s("start")), ("current_password", s(PASSWORD))],
        "sign-in" => vec![
            ("email", s("org-owner@sec.example")),
            ("password", s(PASSWORD)),
        ],
        "reset" => vec![("email", s("org-owner@sec.example"))],
        "accept" => vec![
            ("email", s("owner@sec-pending.example")),
            ("password", s(PASSWORD)),
        ],
        _ if path.starts_with("/console/reset/") => vec![("password", s(PASSWORD))],
        _ if path.starts_with("/console/join/") => {
            vec![("email", s("later@sec.example")), ("password", s(PASSWORD))]
        }
        other => panic!("no form for {path} ({other}): add one when adding a route"),
    }
}

/// Every row of every table of people, money and keys, as text (sessions and the limiter's
/// counters are left out: reading a page moves a session's idle clock).
async fn snapshot(api: &Api) -> String {
    use entities::*;
    use sea_orm::EntityTrait;
    let db = &api.state.db;
    let mut out = String::new();
    macro_rules! rows {
        ($($e:ident),*) => {$(
            out.push_str(&format!("{:?}\n", $e::Entity::find().all(db).await.unwrap()));
        )*};
    }
    rows!(
        organizations,
        customers,
        customer_api_keys,
        customer_groups,
        invitations,
        org_billing_tokens,
        org_members,
        partner_members,
        partners,
        partner_tokens,
        console_tokens,
        console_users,
        console_challenges,
        console_recovery_codes,
        audit_records,
        ledger_transactions,
        ledger_entries,
        balance_alerts,
        auto_allocation_rules,
        recharge_rules,
        top_up_sessions
    );
    out
}

fn refused_sign_in(page: &super::console::Page) -> bool {
    page.status == 303 && page.location().starts_with("/console/sign-in")
}

async fn post(
    b: &mut Browser,
    path: &str,
    csrf: Option<&str>,
    form: &[(&'static str, String)],
    origin: Option<&str>,
) -> super::console::Page {
    let mut fields: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    if let Some(c) = csrf {
        fields.push(("csrf", c));
    }
    b.post(path, &fields, origin).await
}

/// The roles a gate keeps out, as fixture people.
fn kept_out(gate: Gate) -> Vec<String> {
    match gate {
        Gate::Org(roles) => ORG_ROLES
            .iter()
            .filter(|r| !roles.contains(r))
            .map(|r| format!("org:{r}"))
            .chain(["outsider".to_string(), "partner:owner".to_string()])
            .collect(),
        Gate::Partner(roles) => PARTNER_ROLES
            .iter()
            .filter(|r| !roles.contains(r))
            .map(|r| format!("partner:{r}"))
            .chain(["outsider".to_string(), "org:owner".to_string()])
            .collect(),
        Gate::Person | Gate::PreSession => Vec::new(),
    }
}

/// One of the people the gate admits.
fn admitted(gate: Gate) -> &'static str {
    match gate {
        Gate::Org(_) => "org:owner",
        Gate::Partner(_) => "partner:owner",
        Gate::Person => "org:member",
        Gate::PreSession => "outsider",
    }
}

async fn check_route(route: Route) {
    let api = Api::start().await;
    let mut fx = fixture(&api).await;
    let path = fill(route.path, &fx, Ids::Own);
    let body = form(route.path, &fx, Ids::Own);
    let before = snapshot(&api).await;
    let unchanged = async |what: &str| {
        assert_eq!(
            before,
            snapshot(&api).await,
            "{}: {what} changed something",
            route.path
        );
    };
    // No session (a signed-in route) or no double-submit cookie (a form before a session).
    let mut nobody = Browser::new(&api);
    let page = post(&mut nobody, &path, Some("forged"), &body, None).await;
    match route.gate {
        // An invitation's link is its own secret: a made-up one is not found.
        Gate::PreSession => assert!(
            page.status == 403 || (route.path.starts_with("/invitations/") && page.status == 404),
            "{}: no token: {} {}",
            route.path,
            page.status,
            page.body
        ),
        _ => assert!(
            refused_sign_in(&page),
            "{}: no session: {}",
            route.path,
            page.status
        ),
    }
    unchanged("no session").await;
    // A cross-site origin.
    let page = post(
        &mut nobody,
        &path,
        None,
        &body,
        Some("https://evil.example"),
    )
    .await;
    assert!(
        matches!(page.status, 303 | 403),
        "{}: cross-site: {}",
        route.path,
        page.status
    );
    unchanged("a cross-site post").await;
    if route.gate == Gate::PreSession {
        return;
    }
    let who = admitted(route.gate);
    let csrf = fx.people[who].csrf.clone();
    {
        let p = fx.people.get_mut(who).unwrap();
        for token in [None, Some("not the session's token")] {
            let page = post(&mut p.b, &path, token, &body, None).await;
            assert_eq!(page.status, 403, "{}: CSRF {token:?}", route.path);
        }
        let page = post(
            &mut p.b,
            &path,
            Some(&csrf),
            &body,
            Some("https://evil.example"),
        )
        .await;
        assert_eq!(page.status, 403, "{}: cross-site with a token", route.path);
    }
    unchanged("a forged post").await;
    // Everyone the gate keeps out.
    for name in kept_out(route.gate) {
        let p = fx.people.get_mut(&name).unwrap();
        let csrf = p.csrf.clone();
        let page = post(&mut p.b, &path, Some(&csrf), &body, None).await;
        assert!(
            matches!(page.status, 403 | 404),
            "{}: {name} got {}: {}",
            route.path,
            page.status,
            page.body
        );
        unchanged(&name).await;
    }
    if let Gate::Partner(_) = route.gate {
        let path = fill(route.path, &fx, Ids::ViewerPartner);
        let p = fx.people.get_mut("viewer-partner:owner").unwrap();
        let csrf = p.csrf.clone();
        let page = post(&mut p.b, &path, Some(&csrf), &body, None).await;
        assert!(
            matches!(page.status, 403 | 404),
            "{}: a viewer partner's owner got {}",
            route.path,
            page.status
        );
        unchanged("a viewer partner's owner").await;
    }
    if matches!(route.gate, Gate::Org(_) | Gate::Partner(_)) {
        for (ids, allowed) in [
            (Ids::Other, &[403u16, 404][..]),
            (Ids::OtherNested, &[400, 403, 404][..]),
        ] {
            let other = fill(route.path, &fx, ids);
            if other == path {
                continue;
            }
            let body = form(route.path, &fx, ids);
            let p = fx.people.get_mut(who).unwrap();
            let page = post(&mut p.b, &other, Some(&csrf), &body, None).await;
            assert!(
                allowed.contains(&page.status),
                "{other}: another tenant's ids got {}: {}",
                page.status,
                page.body
            );
            unchanged("another tenant's ids").await;
        }
    }
    // The same post by an admitted person gets through.
    let p = fx.people.get_mut(who).unwrap();
    let cookie = p.b.cookies[SESSION].clone();
    let page = post(&mut p.b, &path, Some(&csrf), &body, None).await;
    if route.path.ends_with("/sign-out") || route.path.ends_with("/sign-out-everywhere") {
        // Signing out leads to the sign-in page; it got through if the session ended.
        assert_eq!(page.status, 303, "{}", route.path);
        let mut stale = Browser::new(&api);
        stale.cookies.insert(SESSION.into(), cookie);
        assert!(
            refused_sign_in(&stale.get("/console/").await),
            "{}",
            route.path
        );
        return;
    }
    assert!(
        matches!(page.status, 200 | 303) && !refused_sign_in(&page),
        "{}: the admitted {who} got {}: {}",
        route.path,
        page.status,
        page.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_state_changing_route_refuses_everyone_its_gate_keeps_out() {
    let routes = admin_api::http::state_changing_routes();
    assert!(routes.len() >= 30, "{routes:?}");
    for gate in [Gate::PreSession, Gate::Person] {
        assert!(routes.iter().any(|r| r.gate == gate));
    }
    // A bounded number of deployments at once.
    let mut tasks = tokio::task::JoinSet::new();
    for chunk in routes.chunks(routes.len().div_ceil(4)) {
        let chunk = chunk.to_vec();
        tasks.spawn(async move {
            for route in chunk {
                check_route(route).await;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
}
