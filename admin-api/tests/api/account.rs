//! `/console/account` over HTTP (issue 42, DESIGN §6e): the password changed with the current
//! one (other sessions end), sign out everywhere, two-factor sign-in with an authenticator app
//! (codes once per step, recovery codes once each, refused codes counted by the limiter), the
//! operator's `require_two_factor`, and what a member's removal or role change ends.

use super::console::{Browser, PASSWORD, Page, SESSION, activate, audit_texts, joined};
use super::*;
use admin_api::services::two_factor;

/// The text of the element with `id` on a page.
fn text_of(page: &Page, id: &str) -> String {
    let marker = format!("id=\"{id}\"");
    let at = page.body.find(&marker).expect("the element");
    let rest = &page.body[at..];
    let start = rest.find('>').unwrap() + 1;
    rest[start..start + rest[start..].find('<').unwrap()].to_string()
}

/// The recovery codes shown once on a page.
fn recovery_codes(page: &Page) -> Vec<String> {
    let at = page
        .body
        .find("id=\"recovery-codes\"")
        .expect("recovery codes");
    let list = &page.body[at..at + page.body[at..].find("</ul>").unwrap()];
    list.split("<code>")
        .skip(1)
        .map(|c| c[..c.find('<').unwrap()].to_string())
        .collect()
}

async fn post_account(b: &mut Browser, path: &str, form: &[(&str, &str)]) -> Page {
    let csrf = b.get("/console/account").await.csrf();
    let mut fields = vec![("csrf", csrf.as_str())];
    fields.extend_from_slice(form);
    b.post(path, &fields, None).await
}

#[tokio::test]
async fn the_password_is_changed_with_the_current_one_and_other_sessions_end() {
    let api = Api::start().await;
    let (mut first, _, email) = activate(&api, "account-a").await;
    let mut second = Browser::new(&api);
    assert_eq!(second.sign_in(&email, PASSWORD).await.status, 303);
    let page = first.get("/console/account").await;
    assert_eq!(page.status, 200);
    for needle in [
        "Change password",
        "Sign out everywhere",
        "Two-factor sign-in",
        "this browser",
    ] {
        assert!(page.body.contains(needle), "{needle}");
    }
    let new = "a new and longer pass phrase";
    let path = "/console/account/password";
    let wrong = post_account(
        &mut first,
        path,
        &[
            ("current_password", "not my password at all"),
            ("new_password", new),
        ],
    )
    .await;
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    let weak = post_account(
        &mut first,
        path,
        &[("current_password", PASSWORD), ("new_password", "short")],
    )
    .await;
    assert_eq!(weak.status, 400);
    assert_eq!(second.get("/console/").await.status, 200, "nothing changed");
    // A forged post (no token) changes nothing.
    let forged = first
        .post(
            path,
            &[("current_password", PASSWORD), ("new_password", new)],
            None,
        )
        .await;
    assert_eq!(forged.status, 403);
    let done = post_account(
        &mut first,
        path,
        &[("current_password", PASSWORD), ("new_password", new)],
    )
    .await;
    assert_eq!(
        (done.status, done.location()),
        (303, "/console/account?done=password")
    );
    assert_eq!(
        first.get("/console/").await.status,
        200,
        "this browser stays in"
    );
    assert_eq!(
        second.get("/console/").await.status,
        303,
        "the other session ended"
    );
    assert_eq!(
        Browser::new(&api).sign_in(&email, PASSWORD).await.status,
        401
    );
    assert_eq!(Browser::new(&api).sign_in(&email, new).await.status, 303);
    let audit = audit_texts(&api).await;
    assert!(audit.iter().any(|a| a.starts_with("password_changed")));
    assert!(
        audit
            .iter()
            .any(|a| a.starts_with("check_failed") && a.contains("password_change"))
    );
    // Sign out everywhere: every session of the account, this one too.
    let mut third = Browser::new(&api);
    assert_eq!(third.sign_in(&email, new).await.status, 303);
    let out = post_account(&mut first, "/console/account/sign-out-everywhere", &[]).await;
    assert_eq!((out.status, out.location()), (303, "/console/sign-in"));
    assert!(!first.cookies.contains_key(SESSION));
    assert_eq!(third.get("/console/").await.status, 303);
    assert!(
        audit_texts(&api)
            .await
            .iter()
            .any(|a| a.starts_with("signed_out_everywhere"))
    );
}

#[tokio::test]
async fn two_factor_sign_in_takes_an_app_code_once_and_each_recovery_code_once() {
    let api = Api::start().await;
    let (mut b, _, email) = activate(&api, "account-2fa").await;
    let start = chrono::Utc::now();
    api.state.clock.set(Some(start));
    let path = "/console/account/two-factor";
    // Setting up needs the current password.
    let refused = post_account(
        &mut b,
        path,
        &[
            ("action", "start"),
            ("current_password", "not my password at all"),
        ],
    )
    .await;
    assert_eq!(refused.status, 401);
    let setup = post_account(
        &mut b,
        path,
        &[("action", "start"), ("current_password", PASSWORD)],
    )
    .await;
    assert_eq!(setup.status, 200, "{}", setup.body);
    assert!(setup.body.contains("<svg"), "a QR code");
    let key = text_of(&setup, "totp-key");
    let code = |at: chrono::DateTime<chrono::Utc>| two_factor::code_at(&key, &email, at).unwrap();
    // A wrong code leaves it off; the app's code turns it on and shows ten recovery codes.
    let wrong = if code(start) == "000000" {
        "111111"
    } else {
        "000000"
    };
    let bad = post_account(&mut b, path, &[("action", "enable"), ("code", wrong)]).await;
    assert_eq!(bad.status, 401);
    let on = post_account(
        &mut b,
        path,
        &[("action", "enable"), ("code", &code(start))],
    )
    .await;
    assert_eq!(on.status, 200, "{}", on.body);
    let codes = recovery_codes(&on);
    assert_eq!(codes.len(), 10);
    let again = b.get("/console/account").await;
    assert!(
        !again.body.contains(&codes[0]),
        "recovery codes are shown once"
    );
    assert!(
        again
            .body
            .contains("Recovery codes left: <strong data-figure=\"recovery-left\">10")
    );
    // Signing in now asks for the second factor; the password alone opens no session.
    let later = start + chrono::Duration::seconds(90);
    api.state.clock.set(Some(later));
    let mut other = Browser::new(&api);
    let asked = other.sign_in(&email, PASSWORD).await;
    assert_eq!(asked.status, 200, "{}", asked.body);
    assert!(asked.body.contains("Authentication code"));
    assert!(!other.cookies.contains_key(SESSION));
    let second = |page: &Page, code: &str| (page.csrf(), code.to_string());
    let (csrf, c) = second(&asked, wrong);
    let refused = other
        .post(
            "/console/sign-in",
            &[("csrf", &csrf), ("two_factor_code", &c)],
            None,
        )
        .await;
    assert_eq!(refused.status, 401);
    assert!(!other.cookies.contains_key(SESSION));
    let (csrf, c) = second(&refused, &code(later));
    let done = other
        .post(
            "/console/sign-in",
            &[("csrf", &csrf), ("two_factor_code", &c)],
            None,
        )
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    assert!(other.cookies.contains_key(SESSION));
    // The same code (same step) a second time: refused, even with the right password first.
    let mut replay = Browser::new(&api);
    let asked = replay.sign_in(&email, PASSWORD).await;
    let replayed = replay
        .post(
            "/console/sign-in",
            &[("csrf", &asked.csrf()), ("two_factor_code", &code(later))],
            None,
        )
        .await;
    assert_eq!(replayed.status, 401, "a code is accepted once");
    // A recovery code works once.
    let mut lost_phone = Browser::new(&api);
    let asked = lost_phone.sign_in(&email, PASSWORD).await;
    let used = lost_phone
        .post(
            "/console/sign-in",
            &[("csrf", &asked.csrf()), ("two_factor_code", &codes[3])],
            None,
        )
        .await;
    assert_eq!(used.status, 303, "{}", used.body);
    let mut again = Browser::new(&api);
    let asked = again.sign_in(&email, PASSWORD).await;
    let reused = again
        .post(
            "/console/sign-in",
            &[("csrf", &asked.csrf()), ("two_factor_code", &codes[3])],
            None,
        )
        .await;
    assert_eq!(reused.status, 401);
    // Turning it off needs the password; then the password alone signs in again.
    let off = post_account(
        &mut b,
        path,
        &[("action", "disable"), ("current_password", PASSWORD)],
    )
    .await;
    assert_eq!(off.status, 200, "{}", off.body);
    assert_eq!(
        Browser::new(&api).sign_in(&email, PASSWORD).await.status,
        303
    );
    let audit = audit_texts(&api).await;
    for action in [
        "two_factor_enabled",
        "recovery_code_used",
        "two_factor_disabled",
    ] {
        assert!(audit.iter().any(|a| a.starts_with(action)), "{action}");
    }
    assert!(
        audit
            .iter()
            .any(|a| a.starts_with("check_failed") && a.contains("two_factor"))
    );
    api.state.clock.set(None);
}

#[tokio::test]
async fn the_operator_can_require_two_factor_of_partner_owners_and_admins() {
    let api = Api::start_with("\n[console]\nrequire_two_factor = true\n").await;
    let acme = api.owner("10").await;
    let mut olga = joined(&api, None, Some(acme.id), "olga@acme.example", "owner").await;
    let dashboard = format!("/console/partners/{}", acme.id);
    let sent = olga.get(&dashboard).await;
    assert_eq!((sent.status, sent.location()), (303, "/console/account"));
    let account = olga.get("/console/account").await;
    assert!(
        account.body.contains("requires two-factor sign-in"),
        "{}",
        account.body
    );
    // A viewer of the partner, and an organization's owner, are not held up.
    let mut vic = joined(&api, None, Some(acme.id), "vic@acme.example", "viewer").await;
    assert_eq!(vic.get(&dashboard).await.status, 200);
    let (mut org_owner, org, _) = activate(&api, "account-req").await;
    assert_eq!(
        org_owner.get(&format!("/console/orgs/{org}")).await.status,
        200
    );
    // Once on, the dashboard opens.
    let now = chrono::Utc::now();
    api.state.clock.set(Some(now));
    let setup = post_account(
        &mut olga,
        "/console/account/two-factor",
        &[("action", "start"), ("current_password", PASSWORD)],
    )
    .await;
    let key = text_of(&setup, "totp-key");
    let code = two_factor::code_at(&key, "olga@acme.example", now).unwrap();
    let on = post_account(
        &mut olga,
        "/console/account/two-factor",
        &[("action", "enable"), ("code", &code)],
    )
    .await;
    assert_eq!(on.status, 200, "{}", on.body);
    assert_eq!(olga.get(&dashboard).await.status, 200);
    api.state.clock.set(None);
}

/// A member's removal or role change ends at once what came from their role: the team's open
/// sign-up links they sent (when they can no longer invite) and their dashboard tokens (revoked,
/// or capped at the new role); a manager revokes an open link by hand. Each with its audit
/// record.
#[tokio::test]
async fn what_a_members_role_gave_ends_with_the_role() {
    let api = Api::start().await;
    let acme = api.owner("10").await;
    let team = format!("/console/partners/{}/team", acme.id);
    let mut olga = joined(&api, None, Some(acme.id), "olga@acme.example", "owner").await;
    let mut ada = joined(&api, None, Some(acme.id), "ada@acme.example", "admin").await;
    // Ada sends a link and makes a token.
    let csrf = ada.get(&team).await.csrf();
    let invited = ada
        .post(
            &team,
            &[
                ("csrf", &csrf),
                ("email", "new@acme.example"),
                ("role", "viewer"),
            ],
            None,
        )
        .await;
    assert_eq!(invited.status, 200, "{}", invited.body);
    let link = text_of(&invited, "join-link");
    let join = link[link.find("/console/join/").unwrap()..].to_string();
    let tokens = format!("/console/partners/{}/tokens", acme.id);
    let csrf = ada.get(&tokens).await.csrf();
    let made = ada
        .post(
            &tokens,
            &[("csrf", &csrf), ("scope", "partner:write")],
            None,
        )
        .await;
    let token = Partner {
        id: acme.id,
        token: super::dashboard::shown_token(&made),
    };
    assert_eq!(api.get(&token, "/me").await.1["data"]["role"], "admin");
    // Ada becomes an operator: her link ends, her token acts as an operator.
    let page = olga.get(&team).await;
    let ada_id = member_id(&page, "ada@acme.example");
    let changed = olga
        .post(
            &format!("{team}/{ada_id}"),
            &[
                ("csrf", &page.csrf()),
                ("action", "role"),
                ("role", "operator"),
            ],
            None,
        )
        .await;
    assert_eq!(changed.status, 303, "{}", changed.body);
    assert_eq!(Browser::new(&api).get(&join).await.status, 410);
    assert_eq!(api.get(&token, "/me").await.1["data"]["role"], "operator");
    // Olga sends a link and revokes it by hand.
    let csrf = olga.get(&team).await.csrf();
    let sent = olga
        .post(
            &team,
            &[
                ("csrf", &csrf),
                ("email", "later@acme.example"),
                ("role", "viewer"),
            ],
            None,
        )
        .await;
    let link = text_of(&sent, "join-link");
    let join = link[link.find("/console/join/").unwrap()..].to_string();
    let page = olga.get(&team).await;
    let at = page.body.find(&format!("{team}/invitations/")).unwrap();
    let rest = &page.body[at..];
    let action = rest[..rest.find('"').unwrap()].to_string();
    // Ada (an operator now) cannot revoke it.
    let csrf = ada.get(&team).await.csrf();
    assert_eq!(
        ada.post(&action, &[("csrf", &csrf)], None).await.status,
        403
    );
    assert_eq!(Browser::new(&api).get(&join).await.status, 200);
    let revoked = olga.post(&action, &[("csrf", &page.csrf())], None).await;
    assert_eq!(revoked.status, 303, "{}", revoked.body);
    assert_eq!(Browser::new(&api).get(&join).await.status, 410);
    // Removed: her token stops at once.
    let page = olga.get(&team).await;
    let removed = olga
        .post(
            &format!("{team}/{ada_id}"),
            &[("csrf", &page.csrf()), ("action", "remove")],
            None,
        )
        .await;
    assert_eq!(removed.status, 303);
    assert_eq!(api.get(&token, "/me").await.0, 401);
    assert_eq!(
        ada.get(&format!("/console/partners/{}", acme.id))
            .await
            .status,
        404,
        "her session no longer opens the team's pages"
    );
    let audit = audit_texts(&api).await;
    assert!(
        audit
            .iter()
            .any(|a| a.starts_with("member_invitation_revoked"))
    );
    assert!(
        audit.iter().any(
            |a| a.starts_with("member_role_changed") && a.contains("\"sign_up_links_ended\":1")
        )
    );
    assert!(
        audit
            .iter()
            .any(|a| a.starts_with("member_removed") && a.contains("\"partner_tokens_changed\":1"))
    );
}

/// The id of the member with `email` in a team page's forms.
fn member_id(page: &Page, email: &str) -> String {
    let at = page.body.find(email).unwrap();
    let rest = &page.body[at..];
    let marker = "/team/";
    let start = rest.find(marker).unwrap() + marker.len();
    rest[start..start + rest[start..].find('"').unwrap()].to_string()
}

/// Sessions end 30 minutes after their last use and 12 hours after their sign-in whatever
/// happens (the defaults; `[console]` sets both); a session in use stays.
#[tokio::test]
async fn sessions_end_when_idle_and_at_their_absolute_limit() {
    use chrono::Duration;
    let api = Api::start().await;
    let (_, _, email) = activate(&api, "account-idle").await;
    let start = chrono::Utc::now();
    api.state.clock.set(Some(start));
    let mut busy = Browser::new(&api);
    assert_eq!(busy.sign_in(&email, PASSWORD).await.status, 303);
    let mut idle = Browser::new(&api);
    assert_eq!(idle.sign_in(&email, PASSWORD).await.status, 303);
    // Used every 25 minutes, the busy session lives until the 12th hour.
    let mut at = Duration::zero();
    while at < Duration::hours(12) - Duration::minutes(25) {
        at += Duration::minutes(25);
        api.state.clock.set(Some(start + at));
        assert_eq!(busy.get("/console/").await.status, 200, "at {at}");
        if at == Duration::minutes(25) {
            assert_eq!(idle.get("/console/").await.status, 200, "25 minutes idle");
        }
    }
    api.state
        .clock
        .set(Some(start + Duration::minutes(25) + Duration::minutes(31)));
    assert_eq!(idle.get("/console/").await.status, 303, "31 minutes idle");
    api.state
        .clock
        .set(Some(start + Duration::hours(12) + Duration::minutes(1)));
    let ended = busy.get("/console/").await;
    assert!(
        ended.status == 303 && ended.location().starts_with("/console/sign-in"),
        "12 hours after its sign-in"
    );
    api.state.clock.set(None);
    // `[console]` sets both.
    let api = Api::start_with("\n[console]\nsession_idle_minutes = 5\n").await;
    let (_, _, email) = activate(&api, "account-idle-5").await;
    let start = chrono::Utc::now();
    api.state.clock.set(Some(start));
    let mut b = Browser::new(&api);
    assert_eq!(b.sign_in(&email, PASSWORD).await.status, 303);
    api.state.clock.set(Some(start + Duration::minutes(6)));
    assert_eq!(b.get("/console/").await.status, 303, "6 minutes idle of 5");
    api.state.clock.set(None);
}
