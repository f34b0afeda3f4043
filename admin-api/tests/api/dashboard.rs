//! The partner dashboard (issue 29) over HTTP: a team member's pages, partner tokens made,
//! rotated and revoked there and used on the partner API, roles refused on the server even when
//! the request is forged, another partner's ids refused.

use super::console::{Browser, PASSWORD, Page, joined};
use super::*;

/// A new person who joined partner `partner`'s team with `role`, signed in.
async fn team_member(api: &Api, partner: i64, email: &str, role: &str) -> Browser {
    joined(api, None, Some(partner), email, role).await
}

/// The secret shown once on a page (`id="new-token"`).
pub(super) fn shown_token(page: &Page) -> String {
    let marker = "id=\"new-token\" class=\"secret\">";
    let at = page.body.find(marker).expect("a new token on the page");
    let rest = &page.body[at + marker.len()..];
    rest[..rest.find('<').unwrap()].to_string()
}

async fn tokens_of(api: &Api, partner: i64) -> Vec<entities::partner_tokens::Model> {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
    entities::partner_tokens::Entity::find()
        .filter(entities::partner_tokens::Column::PartnerId.eq(partner))
        .order_by_asc(entities::partner_tokens::Column::Id)
        .all(&api.state.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn partner_tokens_are_made_rotated_and_revoked_in_the_dashboard() {
    let api = Api::start().await;
    let acme = api.owner("100").await;
    let mut olga = team_member(&api, acme.id, "olga@acme.example", "owner").await;
    let home = olga.get("/console/").await;
    assert!(
        home.body.contains("Partner dashboards")
            && home
                .body
                .contains(&format!("href=\"/console/partners/{}\"", acme.id)),
        "{}",
        home.body
    );
    let overview = olga.get(&format!("/console/partners/{}", acme.id)).await;
    assert_eq!(overview.status, 200, "{}", overview.body);
    assert!(
        overview
            .body
            .contains("data-figure=\"available\"><data value=\"100\"")
            && overview.body.contains("Partner dashboard"),
        "{}",
        overview.body
    );

    let path = format!("/console/partners/{}/tokens", acme.id);
    let page = olga.get(&path).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("<td>operator</td>") && page.body.contains("Create token"),
        "the operator's token is listed: {}",
        page.body
    );
    let csrf = page.csrf();
    // Refusals change nothing.
    let bad = olga
        .post(&path, &[("csrf", &csrf), ("scope", "partner:admin")], None)
        .await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("role=\"alert\""));
    let forged = olga.post(&path, &[("scope", "partner:write")], None).await;
    assert_eq!(forged.status, 403);
    let cross = olga
        .post(
            &path,
            &[("csrf", &csrf), ("scope", "partner:write")],
            Some("https://evil.example"),
        )
        .await;
    assert_eq!(cross.status, 403);
    assert_eq!(tokens_of(&api, acme.id).await.len(), 1, "nothing minted");

    // Made: shown once, works on the partner API with its maker's role.
    let created = olga
        .post(&path, &[("csrf", &csrf), ("scope", "partner:write")], None)
        .await;
    assert_eq!(created.status, 200, "{}", created.body);
    let secret = shown_token(&created);
    assert!(created.body.contains("data-copy=\"new-token\""));
    let made = Partner {
        id: acme.id,
        token: secret.clone(),
    };
    let (s, me) = api.get(&made, "/me").await;
    assert_eq!(s, 200, "{me}");
    assert_eq!(me["data"]["role"], "owner");
    let (s, v) = api.create(&made, "dash-1", 5.0, 1.0).await;
    assert_eq!(s, 200, "a write with the dashboard's token: {v}");
    let row = tokens_of(&api, acme.id).await.pop().unwrap();
    assert_eq!(row.role.as_deref(), Some("owner"));
    assert!(row.created_by.is_some() && row.last_used_at.is_some());
    let list = olga.get(&path).await;
    assert!(
        list.body.contains("olga@acme.example") && !list.body.contains(&secret),
        "maker shown, secret never again: {}",
        list.body
    );

    // Rotated: the old one stops at once, the new one works.
    let rotated = olga
        .post(
            &format!("{path}/{}", row.id),
            &[("csrf", &csrf), ("action", "rotate")],
            None,
        )
        .await;
    assert_eq!(rotated.status, 200, "{}", rotated.body);
    let fresh = Partner {
        id: acme.id,
        token: shown_token(&rotated),
    };
    let (s, v) = api.get(&made, "/me").await;
    assert_error(s, &v, 401, "PARTNER_API_TOKEN_INVALID");
    assert_eq!(api.get(&fresh, "/me").await.0, 200);
    // Rotating the spent one again: not found, nothing minted.
    let before = tokens_of(&api, acme.id).await.len();
    let again = olga
        .post(
            &format!("{path}/{}", row.id),
            &[("csrf", &csrf), ("action", "rotate")],
            None,
        )
        .await;
    assert_eq!(again.status, 404);
    assert_eq!(tokens_of(&api, acme.id).await.len(), before);

    // Revoked.
    let newest = tokens_of(&api, acme.id).await.pop().unwrap();
    let revoked = olga
        .post(
            &format!("{path}/{}", newest.id),
            &[("csrf", &csrf), ("action", "revoke")],
            None,
        )
        .await;
    assert_eq!(revoked.status, 200);
    let (s, v) = api.get(&fresh, "/me").await;
    assert_error(s, &v, 401, "PARTNER_API_TOKEN_INVALID");
    assert_eq!(
        api.get(&acme, "/me").await.0,
        200,
        "the operator's token is untouched"
    );

    // Audited, in the partner's log.
    let actions: Vec<String> = {
        use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
        entities::audit_records::Entity::find()
            .filter(entities::audit_records::Column::PartnerId.eq(acme.id))
            .all(&api.state.db)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.action)
            .collect()
    };
    for action in [
        "partner_token_created",
        "partner_token_rotated",
        "partner_token_revoked",
    ] {
        assert!(actions.iter().any(|a| a == action), "{action}: {actions:?}");
    }
}

#[tokio::test]
async fn operators_and_viewers_cannot_touch_tokens_and_other_partners_stay_hidden() {
    let api = Api::start().await;
    let acme = api.owner("10").await;
    let other = api.owner("10").await;
    let path = format!("/console/partners/{}/tokens", acme.id);
    let operator_token = tokens_of(&api, acme.id).await.pop().unwrap();
    for (email, role) in [
        ("otto@acme.example", "operator"),
        ("vera@acme.example", "viewer"),
    ] {
        let mut b = team_member(&api, acme.id, email, role).await;
        let page = b.get(&path).await;
        assert_eq!(page.status, 200, "{role}");
        assert!(
            !page.body.contains("Create token")
                && !page.body.contains(">Rotate<")
                && !page.body.contains(">Revoke<"),
            "{role} sees no token action: {}",
            page.body
        );
        let csrf = page.csrf();
        let forged = b
            .post(&path, &[("csrf", &csrf), ("scope", "partner:write")], None)
            .await;
        assert_eq!(forged.status, 403, "{role}");
        for action in ["rotate", "revoke"] {
            let forged = b
                .post(
                    &format!("{path}/{}", operator_token.id),
                    &[("csrf", &csrf), ("action", action)],
                    None,
                )
                .await;
            assert_eq!(forged.status, 403, "{role} {action}");
        }
    }
    assert_eq!(tokens_of(&api, acme.id).await.len(), 1, "nothing changed");
    assert_eq!(api.get(&acme, "/me").await.0, 200);

    // Another partner's token id forged into this partner's URL: not found, untouched.
    let mut olga = team_member(&api, acme.id, "olga@acme.example", "owner").await;
    let csrf = olga.get(&path).await.csrf();
    let theirs = tokens_of(&api, other.id).await.pop().unwrap();
    for action in ["rotate", "revoke"] {
        let forged = olga
            .post(
                &format!("{path}/{}", theirs.id),
                &[("csrf", &csrf), ("action", action)],
                None,
            )
            .await;
        assert_eq!(forged.status, 404, "{action}");
    }
    assert_eq!(api.get(&other, "/me").await.0, 200, "still works");
    // Another partner's pages: 404, like a missing one; not listed at home.
    for p in [
        format!("/console/partners/{}", other.id),
        format!("/console/partners/{}/tokens", other.id),
        "/console/partners/999999".to_string(),
        "/console/partners/abc".to_string(),
    ] {
        assert_eq!(olga.get(&p).await.status, 404, "{p}");
    }
    let forged = olga
        .post(
            &format!("/console/partners/{}/tokens", other.id),
            &[("csrf", &csrf), ("scope", "partner:write")],
            None,
        )
        .await;
    assert_eq!(forged.status, 404);
    assert_eq!(tokens_of(&api, other.id).await.len(), 1);
    let home = olga.get("/console/").await;
    assert!(
        !home
            .body
            .contains(&format!("/console/partners/{}\"", other.id))
    );
    // Signed out: the sign-in page.
    assert_eq!(Browser::new(&api).get(&path).await.status, 303);
}

#[tokio::test]
async fn a_dashboard_token_acts_with_its_makers_role_capped_by_the_partners() {
    let api = Api::start().await;
    // A partner the operator made a viewer: its team's owner acts as a viewer in the dashboard
    // (the partner API's rule, `gate::effective_role`): every write is refused on the server
    // and changes nothing, and the pages offer none.
    let viewer_partner = api.partner("viewer", &["partner:read"], "10", "1.0").await;
    let mut olga = team_member(&api, viewer_partner.id, "olga@view.example", "owner").await;
    let base = format!("/console/partners/{}", viewer_partner.id);
    let overview = olga.get(&base).await;
    assert!(overview.body.contains("viewer"), "{}", overview.body);
    let before = (
        api.count("partner_tokens").await,
        api.count("customers").await,
        api.count("console_tokens").await,
        api.count("partner_members").await,
    );
    let csrf = olga.get(&format!("{base}/tokens")).await.csrf();
    for (path, form) in [
        (format!("{base}/tokens"), vec![("scope", "partner:write")]),
        (
            format!("{base}/customers"),
            vec![
                ("name", "Never"),
                ("external_id", "never"),
                ("contact_email", "never@x.example"),
                ("initial_allocation_usd", "0"),
                ("retail_rate_multiplier", "1"),
            ],
        ),
        (
            format!("{base}/team"),
            vec![("email", "x@view.example"), ("role", "viewer")],
        ),
        (
            format!("{base}/funding/alert"),
            vec![("threshold_usd", "5")],
        ),
    ] {
        let mut fields = vec![("csrf", csrf.as_str())];
        fields.extend(form);
        let page = olga.post(&path, &fields, None).await;
        assert_eq!(page.status, 403, "{path}: {}", page.body);
    }
    assert_eq!(
        before,
        (
            api.count("partner_tokens").await,
            api.count("customers").await,
            api.count("console_tokens").await,
            api.count("partner_members").await,
        ),
        "nothing changed"
    );
    let tokens_page = olga.get(&format!("{base}/tokens")).await;
    assert!(
        !tokens_page.body.contains("Create token"),
        "{}",
        tokens_page.body
    );
    // An admin of an owner partner: an admin token (the admin's role, not the partner's).
    let acme = api.owner("10").await;
    let mut ada = team_member(&api, acme.id, "ada@acme.example", "admin").await;
    let path = format!("/console/partners/{}/tokens", acme.id);
    let csrf = ada.get(&path).await.csrf();
    let created = ada
        .post(&path, &[("csrf", &csrf), ("scope", "partner:read")], None)
        .await;
    let token = Partner {
        id: acme.id,
        token: shown_token(&created),
    };
    let (s, me) = api.get(&token, "/me").await;
    assert_eq!(
        (s.as_u16(), me["data"]["role"].as_str()),
        (200, Some("admin"))
    );
    assert_eq!(me["data"]["token"]["scopes"], json!(["partner:read"]));
    let (s, v) = api.create(&token, "nope", 1.0, 1.0).await;
    assert_error(s, &v, 403, "PARTNER_API_SCOPE_REQUIRED");
}

/// The member ids on a team page, in the order listed.
fn member_ids(page: &Page, partner: i64) -> Vec<i64> {
    let marker = format!("action=\"/console/partners/{partner}/team/");
    let mut ids: Vec<i64> = page
        .body
        .match_indices(&marker)
        .map(|(at, _)| {
            let rest = &page.body[at + marker.len()..];
            rest[..rest.find('"').unwrap()].parse().unwrap()
        })
        .collect();
    ids.dedup();
    ids
}

async fn membership_of(api: &Api, partner: i64, email: &str) -> Option<String> {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let user = entities::console_users::Entity::find()
        .filter(entities::console_users::Column::Email.eq(email))
        .one(&api.state.db)
        .await
        .unwrap()?;
    entities::partner_members::Entity::find()
        .filter(entities::partner_members::Column::PartnerId.eq(partner))
        .filter(entities::partner_members::Column::UserId.eq(user.id))
        .one(&api.state.db)
        .await
        .unwrap()
        .map(|m| m.role)
}

#[tokio::test]
async fn the_partner_team_is_managed_by_owners_and_admins_and_keeps_an_owner() {
    let api = Api::start().await;
    let acme = api.owner("10").await;
    let other = api.owner("10").await;
    let mut olga = team_member(&api, acme.id, "olga@acme.example", "owner").await;
    let team = format!("/console/partners/{}/team", acme.id);
    let page = olga.get(&team).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("olga@acme.example (you)") && page.body.contains("Send invitation"));
    let csrf = page.csrf();
    // The owner invites an admin, who joins through the link.
    let invited = olga
        .post(
            &team,
            &[
                ("csrf", &csrf),
                ("email", "Ada@Acme.example"),
                ("role", "admin"),
            ],
            None,
        )
        .await;
    assert_eq!(invited.status, 200, "{}", invited.body);
    let link = {
        let marker = "id=\"join-link\" class=\"secret\">";
        let at = invited.body.find(marker).unwrap();
        let rest = &invited.body[at + marker.len()..];
        rest[..rest.find('<').unwrap()].to_string()
    };
    let join = link[link.find("/console/join/").unwrap()..].to_string();
    let mut ada = Browser::new(&api);
    let c = ada.get(&join).await.csrf();
    let joined = ada
        .with_code(
            &api,
            &join,
            &[
                ("csrf", &c),
                ("email", "ada@acme.example"),
                ("password", PASSWORD),
            ],
            "ada@acme.example",
        )
        .await;
    assert_eq!(joined.status, 303, "{}", joined.body);
    assert_eq!(
        membership_of(&api, acme.id, "ada@acme.example")
            .await
            .as_deref(),
        Some("admin")
    );
    // The admin invites an operator, but never an owner; the admin's role list has no owner.
    let page = ada.get(&team).await;
    assert!(
        !page.body.contains("<option value=\"owner\""),
        "{}",
        page.body
    );
    let csrf = page.csrf();
    let tokens = api.count("console_tokens").await;
    let owner_invite = ada
        .post(
            &team,
            &[
                ("csrf", &csrf),
                ("email", "eve@acme.example"),
                ("role", "owner"),
            ],
            None,
        )
        .await;
    assert_eq!(owner_invite.status, 403);
    assert_eq!(api.count("console_tokens").await, tokens, "no link issued");
    let mut otto = team_member(&api, acme.id, "otto@acme.example", "operator").await;
    let page = ada.get(&team).await;
    let ids = member_ids(&page, acme.id);
    assert_eq!(
        ids.len(),
        2,
        "the admin may change the admin and the operator, not the owner"
    );
    let olga_id = {
        use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
        entities::partner_members::Entity::find()
            .filter(entities::partner_members::Column::PartnerId.eq(acme.id))
            .filter(entities::partner_members::Column::Role.eq("owner"))
            .one(&api.state.db)
            .await
            .unwrap()
            .unwrap()
            .id
    };
    for form in [
        vec![
            ("csrf", csrf.as_str()),
            ("action", "role"),
            ("role", "viewer"),
        ],
        vec![("csrf", csrf.as_str()), ("action", "remove")],
    ] {
        let forged = ada.post(&format!("{team}/{olga_id}"), &form, None).await;
        assert_eq!(forged.status, 403, "{form:?}");
    }
    assert_eq!(
        membership_of(&api, acme.id, "olga@acme.example")
            .await
            .as_deref(),
        Some("owner"),
        "the owner is untouched"
    );
    let otto_id = *ids.last().unwrap();
    let changed = ada
        .post(
            &format!("{team}/{otto_id}"),
            &[("csrf", &csrf), ("action", "role"), ("role", "viewer")],
            None,
        )
        .await;
    assert_eq!(changed.status, 303, "{}", changed.body);
    assert_eq!(
        membership_of(&api, acme.id, "otto@acme.example")
            .await
            .as_deref(),
        Some("viewer")
    );
    // A viewer (or an operator) manages nothing and reads no audit log.
    let page = otto.get(&team).await;
    assert!(!page.body.contains("Send invitation") && !page.body.contains(">Remove<"));
    let forged = otto
        .post(
            &team,
            &[
                ("csrf", &page.csrf()),
                ("email", "x@acme.example"),
                ("role", "viewer"),
            ],
            None,
        )
        .await;
    assert_eq!(forged.status, 403);
    let audit = format!("/console/partners/{}/audit", acme.id);
    assert_eq!(otto.get(&audit).await.status, 403);
    let log = ada.get(&audit).await;
    assert_eq!(log.status, 200);
    assert!(log.body.contains("member invited") && log.body.contains("member role changed"));
    // The last owner cannot leave or step down.
    let csrf = olga.get(&team).await.csrf();
    for form in [
        vec![
            ("csrf", csrf.as_str()),
            ("action", "role"),
            ("role", "admin"),
        ],
        vec![("csrf", csrf.as_str()), ("action", "remove")],
    ] {
        let refused = olga.post(&format!("{team}/{olga_id}"), &form, None).await;
        assert_eq!(refused.status, 409, "{form:?}");
        assert!(refused.body.contains("at least one owner"));
    }
    // Removal: the removed person's dashboard answers 404 at once.
    let removed = olga
        .post(
            &format!("{team}/{otto_id}"),
            &[("csrf", &csrf), ("action", "remove")],
            None,
        )
        .await;
    assert_eq!(removed.status, 303);
    assert_eq!(otto.get(&team).await.status, 404);
    // Another partner's member id forged into this team's URL: not found, untouched.
    let mut theirs = team_member(&api, other.id, "oz@other.example", "owner").await;
    let their_id = member_ids(
        &theirs
            .get(&format!("/console/partners/{}/team", other.id))
            .await,
        other.id,
    )[0];
    let forged = olga
        .post(
            &format!("{team}/{their_id}"),
            &[("csrf", &csrf), ("action", "remove")],
            None,
        )
        .await;
    assert_eq!(forged.status, 404);
    assert_eq!(
        membership_of(&api, other.id, "oz@other.example")
            .await
            .as_deref(),
        Some("owner")
    );
}

/// A form's fields as the browser helper takes them.
fn as_pairs(f: &[(String, String)]) -> Vec<(&str, &str)> {
    f.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// Whether the input with `id` on `page` is marked invalid.
fn invalid(page: &Page, id: &str) -> bool {
    let Some(at) = page.body.find(&format!("id=\"{id}\"")) else {
        return false;
    };
    let tag = &page.body[at..at + page.body[at..].find('>').unwrap()];
    tag.contains("aria-invalid=\"true\"")
}

#[tokio::test]
async fn customers_are_created_with_the_apis_rules_and_listed_searched_and_paged() {
    let api = Api::start().await;
    let acme = api.owner("1000").await;
    let other = api.owner("10").await;
    let mut olga = team_member(&api, acme.id, "olga@acme.example", "owner").await;
    let path = format!("/console/partners/{}/customers", acme.id);
    let page = olga.get(&path).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("No customers yet") && page.body.contains("Create customer"));
    let csrf = page.csrf();
    let form = |name: &str, external: &str, contact: &str, allocation: &str, rate: &str| {
        vec![
            ("csrf".to_string(), csrf.clone()),
            ("name".to_string(), name.to_string()),
            ("external_id".to_string(), external.to_string()),
            ("contact_email".to_string(), contact.to_string()),
            ("billing_email".to_string(), String::new()),
            ("initial_allocation_usd".to_string(), allocation.to_string()),
            ("retail_rate_multiplier".to_string(), rate.to_string()),
        ]
    };
    // Refusals: the API's reason, next to its field, nothing created.
    for (f, status, reason, input) in [
        (
            form("", "c-1", "a@c1.example", "1", "1.2"),
            400,
            "INVALID_PARTNER_CUSTOMER",
            "c-name",
        ),
        (
            form("C", "has space", "a@c1.example", "1", "1.2"),
            400,
            "INVALID_PARTNER_EXTERNAL_CUSTOMER_ID",
            "c-external",
        ),
        (
            form("C", "c-1", "not-an-address", "1", "1.2"),
            400,
            "INVALID_PARTNER_CUSTOMER_CONTACT",
            "c-contact",
        ),
        (
            form("C", "c-1", "a@c1.example", "-1", "1.2"),
            400,
            "INVALID_PARTNER_INITIAL_ALLOCATION",
            "c-allocation",
        ),
        (
            form("C", "c-1", "a@c1.example", "ten", "1.2"),
            400,
            "INVALID_PARTNER_INITIAL_ALLOCATION",
            "c-allocation",
        ),
        (
            form("C", "c-1", "a@c1.example", "1", "0"),
            400,
            "INVALID_PARTNER_RETAIL_RATE",
            "c-rate",
        ),
        (
            form("C", "c-1", "a@c1.example", "1", "0.5"),
            400,
            "PARTNER_RETAIL_RATE_BELOW_FLOOR",
            "c-rate",
        ),
        (
            form("C", "c-1", "a@c1.example", "5000", "1.2"),
            403,
            "PARTNER_FUNDING_INSUFFICIENT",
            "c-allocation",
        ),
    ] {
        let pairs = as_pairs(&f);
        let refused = olga.post(&path, &pairs, None).await;
        assert_eq!(refused.status, status, "{reason}: {}", refused.body);
        assert!(refused.body.contains(reason), "{reason}");
        assert!(invalid(&refused, input), "{reason} marks {input}");
    }
    assert_eq!(api.count("customers").await, 0, "nothing created");
    // Created: invited by mail, visible to the partner API.
    let f = form("Cust Zero", "cust-000", "zed@c0.example", "10", "1.2");
    let pairs = as_pairs(&f);
    let created = olga.post(&path, &pairs, None).await;
    assert_eq!(created.status, 200, "{}", created.body);
    assert!(
        created.body.contains("was created and invited"),
        "{}",
        created.body
    );
    let (s, v) = api.get(&acme, "/customers/by-external-id/cust-000").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["data"]["status"], "pending_activation");
    let again = olga.post(&path, &pairs, None).await;
    assert_eq!(again.status, 200);
    assert!(again.body.contains("already exists"));
    let f = form("Cust Zero", "cust-000", "other@c0.example", "10", "1.2");
    let pairs = as_pairs(&f);
    let conflict = olga.post(&path, &pairs, None).await;
    assert_eq!(conflict.status, 409);
    assert!(
        conflict.body.contains("PARTNER_EXTERNAL_CUSTOMER_CONFLICT")
            && invalid(&conflict, "c-external")
    );
    assert_eq!(api.count("customers").await, 1);
    // Paged by 50, newest first; searched by name or external id, case-insensitive, literally.
    for i in 1..=54 {
        let f = form(
            &format!("Cust {i:03}"),
            &format!("cust-{i:03}"),
            &format!("c{i}@cust.example"),
            "0",
            "1.2",
        );
        let pairs = as_pairs(&f);
        assert_eq!(olga.post(&path, &pairs, None).await.status, 200, "{i}");
    }
    let first = olga.get(&path).await;
    assert_eq!(first.body.matches("<th scope=\"row\">").count(), 50);
    assert!(first.body.contains("55 customers") && first.body.contains("Page 1 of 2"));
    assert!(first.body.contains(">Cust 054</a></th>"), "newest first");
    assert!(first.body.contains("rel=\"next\"") && !first.body.contains("rel=\"prev\""));
    let second = olga.get(&format!("{path}?page=2")).await;
    assert_eq!(second.body.matches("<th scope=\"row\">").count(), 5);
    assert!(second.body.contains(">Cust Zero</a></th>"));
    let clamped = olga.get(&format!("{path}?page=99")).await;
    assert!(clamped.body.contains("Page 2 of 2"));
    for (q, rows) in [
        ("CUST-007", 1),
        ("cust 01", 10),
        ("zero", 1),
        ("%", 0),
        ("_", 0),
    ] {
        let found = olga
            .get(&format!(
                "{path}?q={}",
                url::form_urlencoded::byte_serialize(q.as_bytes()).collect::<String>()
            ))
            .await;
        assert_eq!(found.status, 200);
        assert_eq!(
            found.body.matches("<th scope=\"row\">").count(),
            rows,
            "{q}: {}",
            found.body
        );
    }
    // Balance and spend: a pending customer has no balance yet; an active one its available
    // balance; a settled call shows in the 7-day spend (and the mirror, which that call did not
    // pass through, is reported as being reconciled, never as a figure it cannot vouch for).
    assert!(first.body.contains("not active yet"));
    let (_, org) = api.active_customer(&acme, "active-1", 40.0, 1.0).await;
    let listed = olga.get(&format!("{path}?q=active-1")).await;
    assert!(
        listed
            .body
            .contains("><data value=\"40\" title=\"40 USD\">40.00</data> USD<"),
        "{}",
        listed.body
    );
    assert!(listed.body.contains(">active<"));
    super::console::spend(
        &api,
        org,
        1,
        "gpt-4o-mini",
        &chrono::Utc::now().to_rfc3339(),
        2_500_000,
        0,
    )
    .await;
    admin_api::workers::settler::drain_once(&api.state, "t")
        .await
        .unwrap();
    let listed = olga.get(&format!("{path}?q=active-1")).await;
    assert!(listed.body.contains(">0.0025<"), "{}", listed.body);
    // Another partner's customers never show.
    let (s, _) = api.create(&other, "theirs-1", 1.0, 1.0).await;
    assert_eq!(s, 200);
    let all = olga.get(&format!("{path}?q=theirs")).await;
    assert!(all.body.contains("No customer matches"), "{}", all.body);
    // A viewer reads the list but creates nothing, even forged.
    let mut vera = team_member(&api, acme.id, "vera@acme.example", "viewer").await;
    let seen = vera.get(&path).await;
    assert!(seen.body.contains("55 customers") || seen.body.contains("56 customers"));
    assert!(!seen.body.contains("Create customer"));
    let before = api.count("customers").await;
    let forged = vera
        .post(
            &path,
            &[
                ("csrf", &seen.csrf()),
                ("name", "V"),
                ("external_id", "v-1"),
                ("contact_email", "v@v.example"),
                ("initial_allocation_usd", "0"),
                ("retail_rate_multiplier", "1.2"),
            ],
            None,
        )
        .await;
    assert_eq!(forged.status, 403);
    assert_eq!(api.count("customers").await, before);
    // Another partner's customer list: 404.
    assert_eq!(
        olga.get(&format!("/console/partners/{}/customers", other.id))
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn a_customer_page_moves_money_prices_keys_and_invitations_with_the_apis_rules() {
    let api = Api::start().await;
    let acme = api.owner("100").await;
    let other = api.owner("10").await;
    let mut olga = team_member(&api, acme.id, "olga@acme.example", "owner").await;
    // A pending customer: its invitation is re-issued and revoked here.
    let (s, v) = api.create(&acme, "pending-1", 0.0, 1.2).await;
    assert_eq!(s, 200, "{v}");
    let pending = v["data"]["customer"]["id"].as_i64().unwrap();
    let path = format!("/console/partners/{}/customers/{pending}", acme.id);
    let page = olga.get(&path).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("Invitation: <strong>pending</strong>")
            && page.body.contains("has not activated yet")
    );
    let csrf = page.csrf();
    let mails = std::fs::read_dir(&api.outbox)
        .map(|d| d.count())
        .unwrap_or(0);
    let reissued = olga
        .post(
            &format!("{path}/invitation"),
            &[("csrf", &csrf), ("action", "reissue")],
            None,
        )
        .await;
    assert_eq!(reissued.status, 200, "{}", reissued.body);
    assert!(
        reissued
            .body
            .contains("A new invitation was mailed to owner@pending-1.example")
    );
    let old_link = v["data"]["activation"]["invite_url"].as_str().unwrap();
    let old_path = &old_link[old_link.find("/invitations/").unwrap()..];
    assert_ne!(olga.get(old_path).await.status, 200, "the old link stops");
    for _ in 0..50 {
        if std::fs::read_dir(&api.outbox)
            .map(|d| d.count())
            .unwrap_or(0)
            > mails
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        std::fs::read_dir(&api.outbox)
            .map(|d| d.count())
            .unwrap_or(0)
            > mails,
        "mailed"
    );
    let revoked = olga
        .post(
            &format!("{path}/invitation"),
            &[("csrf", &csrf), ("action", "revoke")],
            None,
        )
        .await;
    assert!(revoked.body.contains("was revoked"), "{}", revoked.body);
    assert!(
        revoked
            .body
            .contains("Invitation: <strong>revoked</strong>"),
        "{}",
        revoked.body
    );
    // Pending: allocations and keys wait for activation, with the API's reason.
    let refused = olga
        .post(
            &format!("{path}/keys"),
            &[("csrf", &csrf), ("name", "k"), ("group_id", "1")],
            None,
        )
        .await;
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert!(refused.body.contains("PARTNER_CUSTOMER_PENDING_ACTIVATION"));

    // An active customer: allocation, rates, keys.
    let (active, org) = api.active_customer(&acme, "active-1", 10.0, 1.2).await;
    let path = format!("/console/partners/{}/customers/{active}", acme.id);
    let page = olga.get(&path).await;
    assert!(
        page.body
            .contains("data-figure=\"available\"><data value=\"10\""),
        "{}",
        page.body
    );
    let funding_before = api.funding(&acme).await;
    let more = olga
        .post(
            &format!("{path}/allocations"),
            &[
                ("csrf", &csrf),
                ("direction", "increase"),
                ("amount_usd", "5"),
            ],
            None,
        )
        .await;
    assert_eq!(more.status, 200, "{}", more.body);
    assert!(
        more.body
            .contains("data-figure=\"available\"><data value=\"15\""),
        "{}",
        more.body
    );
    let (s, b) = api
        .get(&acme, &format!("/customers/{active}/balance"))
        .await;
    assert_eq!(s, 200);
    assert_eq!(
        b["data"]["organization_available_usd"], 15,
        "the API sees it: {b}"
    );
    assert_ne!(
        api.funding(&acme).await,
        funding_before,
        "partner funding moved"
    );
    for (amount, reason) in [
        ("0", "INVALID_PARTNER_ALLOCATION_AMOUNT"),
        ("ten", "INVALID_PARTNER_ALLOCATION_AMOUNT"),
    ] {
        let bad = olga
            .post(
                &format!("{path}/allocations"),
                &[
                    ("csrf", &csrf),
                    ("direction", "increase"),
                    ("amount_usd", amount),
                ],
                None,
            )
            .await;
        assert_eq!(bad.status, 400, "{amount}");
        assert!(bad.body.contains(reason), "{amount}: {}", bad.body);
    }
    let too_much = olga
        .post(
            &format!("{path}/allocations"),
            &[
                ("csrf", &csrf),
                ("direction", "decrease"),
                ("amount_usd", "20"),
            ],
            None,
        )
        .await;
    assert_eq!(too_much.status, 400, "{}", too_much.body);
    assert!(
        too_much
            .body
            .contains("PARTNER_ALLOCATION_LIMIT_BELOW_USED")
    );
    assert!(
        too_much
            .body
            .contains("data-figure=\"available\"><data value=\"15\""),
        "nothing changed"
    );
    let less = olga
        .post(
            &format!("{path}/allocations"),
            &[
                ("csrf", &csrf),
                ("direction", "decrease"),
                ("amount_usd", "3"),
            ],
            None,
        )
        .await;
    assert!(
        less.body
            .contains("data-figure=\"available\"><data value=\"12\""),
        "{}",
        less.body
    );
    // Rates: below the floor refused with the floor named; at the floor accepted.
    let below = olga
        .post(
            &format!("{path}/rates"),
            &[
                ("csrf", &csrf),
                ("group_id", "1"),
                ("retail_rate_multiplier", "0.5"),
            ],
            None,
        )
        .await;
    assert_eq!(below.status, 400);
    assert!(
        below.body.contains("PARTNER_RETAIL_RATE_BELOW_FLOOR")
            && below.body.contains("at least the floor, 1"),
        "{}",
        below.body
    );
    let at_floor = olga
        .post(
            &format!("{path}/rates"),
            &[
                ("csrf", &csrf),
                ("group_id", "1"),
                ("retail_rate_multiplier", "1"),
            ],
            None,
        )
        .await;
    assert_eq!(at_floor.status, 200, "{}", at_floor.body);
    assert!(
        at_floor.body.contains("data-rate=\"1\">1<"),
        "{}",
        at_floor.body
    );
    let (_, groups) = api.get(&acme, &format!("/customers/{active}/groups")).await;
    assert_eq!(groups["data"][0]["rate_multiplier"], 1, "{groups}");
    // Keys: created (shown once, works at the directory), disabled.
    let created = olga
        .post(
            &format!("{path}/keys"),
            &[("csrf", &csrf), ("name", "prod"), ("group_id", "1")],
            None,
        )
        .await;
    assert_eq!(created.status, 200, "{}", created.body);
    let marker = "id=\"new-key\" class=\"secret\">";
    let at = created.body.find(marker).unwrap();
    let rest = &created.body[at + marker.len()..];
    let secret = rest[..rest.find('<').unwrap()].to_string();
    let record = api
        .state
        .stores
        .keys
        .lookup(&api.state.hasher.hash(&secret))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.org_id, org);
    let again = olga.get(&path).await;
    assert!(!again.body.contains(&secret) && again.body.contains("<td>prod</td>"));
    let key_id = record.key_id.to_string();
    let disabled = olga
        .post(
            &format!("{path}/keys/disable"),
            &[("csrf", &csrf), ("key_id", &key_id)],
            None,
        )
        .await;
    assert_eq!(disabled.status, 200, "{}", disabled.body);
    assert!(
        api.state
            .stores
            .keys
            .lookup(&api.state.hasher.hash(&secret))
            .await
            .unwrap()
            .is_none()
    );
    // A viewer reads but cannot act; another partner's customer is not found.
    let mut vera = team_member(&api, acme.id, "vera@acme.example", "viewer").await;
    let seen = vera.get(&path).await;
    assert_eq!(seen.status, 200);
    assert!(
        !seen.body.contains("Change allocation")
            && !seen.body.contains("Create key")
            && !seen.body.contains(">Set rate<")
    );
    let forged = vera
        .post(
            &format!("{path}/allocations"),
            &[
                ("csrf", &seen.csrf()),
                ("direction", "increase"),
                ("amount_usd", "1"),
            ],
            None,
        )
        .await;
    assert_eq!(forged.status, 403);
    let (s, theirs) = api.create(&other, "theirs-1", 0.0, 1.2).await;
    assert_eq!(s, 200);
    let theirs = theirs["data"]["customer"]["id"].as_i64().unwrap();
    let their_path = format!("/console/partners/{}/customers/{theirs}", acme.id);
    assert_eq!(olga.get(&their_path).await.status, 404);
    let forged = olga
        .post(
            &format!("{their_path}/invitation"),
            &[("csrf", &csrf), ("action", "revoke")],
            None,
        )
        .await;
    assert_eq!(forged.status, 404);
    let (_, v) = api.get(&other, &format!("/customers/{theirs}")).await;
    assert_eq!(
        v["data"]["activation"]["invitation_status"], "pending",
        "untouched: {v}"
    );
}

#[tokio::test]
async fn usage_and_margin_equal_the_ledgers_to_the_nano_dollar() {
    let api = Api::start().await;
    let acme = api.owner("100").await;
    let other = api.owner("100").await;
    let (_, m1) = api.active_customer(&acme, "m1", 40.0, 1.25).await;
    let (_, m2) = api.active_customer(&acme, "m2", 40.0, 1.5).await;
    let (_, theirs) = api.active_customer(&other, "theirs", 40.0, 1.25).await;
    let day = "2026-03-04";
    // Charges whose wholesale costs round down one by one: the sum of the rounded costs is what
    // the ledger accrues, not the rounded cost of the sum.
    for (org, model, at, cost) in [
        (m1, "gpt-4o-mini", "T10:15:00Z", 1_000_003),
        (m1, "gpt-4o-mini", "T10:45:00Z", 2_000_001),
        (m1, "gpt-4o", "T15:00:00Z", 123_456_789),
        (m2, "gpt-4o-mini", "T11:00:00Z", 7_777_777),
        (theirs, "gpt-4o-mini", "T11:00:00Z", 5_000_000),
    ] {
        super::console::spend(&api, org, 1, model, &format!("{day}{at}"), cost, 0).await;
    }
    admin_api::workers::settler::drain_once(&api.state, "t")
        .await
        .unwrap();
    let mut olga = team_member(&api, acme.id, "olga@acme.example", "owner").await;
    let path = format!("/console/partners/{}/usage", acme.id);
    let q = format!("?granularity=day&from={day}&to={day}");
    let page = olga.get(&format!("{path}{q}")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let csv = olga.get(&format!("{path}.csv{q}&by=customer")).await;
    assert_eq!(csv.status, 200, "{}", csv.body);
    let rows: Vec<Vec<String>> = csv
        .body
        .split("\r\n")
        .filter(|l| !l.is_empty())
        .map(|l| {
            l.split(',')
                .map(|f| f.trim_matches('"').to_string())
                .collect()
        })
        .collect();
    assert_eq!(
        rows[0][12..].join(","),
        "charged_usd,wholesale_usd,margin_usd",
        "{}",
        csv.body
    );
    let nanos = |s: &str| {
        // JSON numbers may come in scientific notation (8.5e-2).
        let d = s
            .parse::<rust_decimal::Decimal>()
            .or_else(|_| rust_decimal::Decimal::from_scientific(s))
            .unwrap();
        money::NanoUsd::from_decimal_usd(d).unwrap().nanos()
    };
    let (mut charged, mut wholesale, mut margin) = (0i64, 0i64, 0i64);
    for r in &rows[1..] {
        assert_ne!(r[3], "Org theirs", "another partner's customer");
        charged += nanos(&r[12]);
        wholesale += nanos(&r[13]);
        margin += nanos(&r[14]);
    }
    assert_eq!(rows.len(), 3, "two customers: {}", csv.body);
    assert_eq!(charged, 1_000_003 + 2_000_001 + 123_456_789 + 7_777_777);
    assert_eq!(margin, charged - wholesale);
    // The ledger: the partner's outstanding usage is the sum of the wholesale costs, each
    // charge's rounded down on its own.
    let funding = api.funding(&acme).await;
    let outstanding = nanos(&funding["outstanding_usage_usd"].to_string());
    assert_eq!(wholesale, outstanding, "{funding}");
    let by_charge = (1_000_003i64 * 800_000 / 1_250_000)
        + (2_000_001 * 800_000 / 1_250_000)
        + (123_456_789i64 * 800_000 / 1_250_000)
        + (7_777_777 * 800_000 / 1_500_000);
    assert_eq!(wholesale, by_charge);
    assert!(
        page.body.contains(&format!(
            "data-figure=\"margin\"><data value=\"{}\"",
            money::NanoUsd::from_nanos(margin).to_decimal_usd()
        )),
        "{}",
        page.body
    );
    // By model and group the totals are the same.
    for by in ["model", "group", "key"] {
        let csv = olga.get(&format!("{path}.csv{q}&by={by}")).await;
        let w: i64 = csv
            .body
            .split("\r\n")
            .skip(1)
            .filter(|l| !l.is_empty())
            .map(|l| nanos(l.rsplit(',').nth(1).unwrap()))
            .sum();
        assert_eq!(w, wholesale, "{by}: {}", csv.body);
    }
    // Refusals and boundaries: an organization's breakdown by customer does not exist; another
    // partner's usage is not found.
    let bad = olga.get(&format!("{path}?by=account")).await;
    assert_eq!(bad.status, 400);
    assert_eq!(
        olga.get(&format!("/console/partners/{}/usage", other.id))
            .await
            .status,
        404
    );
    // Its streamed CSV neither.
    let forged = olga
        .get(&format!("/console/partners/{}/usage.csv", other.id))
        .await;
    assert_eq!(forged.status, 404);
    assert!(!forged.body.contains("period_start"), "{}", forged.body);
}

#[tokio::test]
async fn funding_shows_the_ledgers_history_and_opens_top_ups() {
    let api = Api::start().await;
    let acme = api.owner("100").await;
    let other = api.owner("5").await;
    let (customer, _) = api.active_customer(&acme, "f1", 10.0, 1.0).await;
    let (s, _) = api
        .write(
            &acme,
            Method::POST,
            &format!("/customers/{customer}/allocations"),
            Some(&json!({"action": "decrease", "amount_usd": 4})),
        )
        .await;
    assert_eq!(s, 200);
    let mut olga = team_member(&api, acme.id, "olga@acme.example", "owner").await;
    let path = format!("/console/partners/{}/funding", acme.id);
    let page = olga.get(&path).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let funding = api.funding(&acme).await;
    let available = funding["available_funding_usd"].to_string();
    assert!(
        page.body.contains(&format!(
            "data-figure=\"available\"><data value=\"{available}\""
        )),
        "{available}: {}",
        page.body
    );
    // Newest first: the release, the allocation, the initial credit; the balance after the
    // newest line is the available funding, and the oldest line's is its own amount.
    let rows: Vec<&str> = page.body.split("<tr><td class=\"when\">").skip(1).collect();
    assert_eq!(rows.len(), 3, "{}", page.body);
    assert!(rows[0].contains("released by a customer") && rows[0].contains(">Org f1</a>"));
    assert!(rows[1].contains("allocated to a customer") && rows[1].contains(">-"));
    assert!(
        rows[2].contains("funding added")
            && rows[2].contains(
                "<data value=\"100\" title=\"100 USD\">100.00</data></td><td class=\"num\"><data value=\"100\" title=\"100 USD\">100.00</data></td>"
            )
    );
    assert!(
        rows[0].contains(&format!(
            "<data value=\"{available}\" title=\"{available} USD\">"
        )),
        "{}",
        rows[0]
    );
    // Add funds: a top-up session of the hosted flow, listed as waiting for payment.
    let csrf = page.csrf();
    let bad = olga
        .post(&path, &[("csrf", &csrf), ("amount_usd", "-3")], None)
        .await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("INVALID_PARTNER_TOP_UP_AMOUNT"));
    let opened = olga
        .post(&path, &[("csrf", &csrf), ("amount_usd", "25")], None)
        .await;
    assert_eq!(opened.status, 303, "{}", opened.body);
    assert!(
        opened.location().contains("/billing/top-up/"),
        "{}",
        opened.location()
    );
    let page = olga.get(&path).await;
    assert!(
        page.body.contains("Top-ups waiting for payment")
            && page.body.contains(">25.00</data></td>")
    );
    // A viewer reads, cannot add; another partner's funding: 404.
    let mut vera = team_member(&api, acme.id, "vera@acme.example", "viewer").await;
    let seen = vera.get(&path).await;
    assert!(seen.body.contains("funding added") && !seen.body.contains("Add funds"));
    let forged = vera
        .post(&path, &[("csrf", &seen.csrf()), ("amount_usd", "5")], None)
        .await;
    assert_eq!(forged.status, 403);
    assert_eq!(
        olga.get(&format!("/console/partners/{}/funding", other.id))
            .await
            .status,
        404
    );
}

/// The dashboard at scale (issue 29): 10,000 customers and a million usage records on
/// PostgreSQL, seeded in SQL; times the customer list (first page, a search, the last page) and
/// the partner's usage pages. Not a pass/fail test: run by `scripts/bench-console`, which prints
/// the figures for the README.
#[tokio::test]
#[ignore = "a benchmark: scripts/bench-console runs it"]
async fn bench_the_dashboard_with_ten_thousand_customers() {
    use sea_orm::ConnectionTrait;
    use std::time::Instant;
    assert!(
        std::env::var("DATABASE_URL").is_ok_and(|u| u.starts_with("postgres")),
        "the benchmark runs on PostgreSQL (DATABASE_URL)"
    );
    let customers: i64 = std::env::var("BENCH_CUSTOMERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let records: i64 = std::env::var("BENCH_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let api = Api::start().await;
    let acme = api.owner("1000").await;
    let db = &api.state.db;
    let seed = Instant::now();
    let p = acme.id;
    for sql in [
        format!(
            "INSERT INTO organizations (name, slug, status, created_at, owner_email, activated_at) \
             SELECT 'Bench customer ' || g, 'bench-' || g, 'active', now(), 'o' || g || '@bench.example', now() \
             FROM generate_series(1, {customers}) g"
        ),
        format!(
            "INSERT INTO customers (partner_id, external_id, organization_id, display_name, contact_email, billing_mode, billing_allocation_mode, allocation_cap_nanos, created_at) \
             SELECT {p}, o.slug, o.id, o.name, o.owner_email, 'prepaid', 'partner_funded', 0, now() \
             FROM organizations o WHERE o.slug LIKE 'bench-%'"
        ),
        format!(
            "INSERT INTO usage_records (request_id, organization_id, api_key_id, group_id, route, model_requested, model_served, account_id, \
             input_tokens, output_tokens, cached_tokens, cache_write_tokens, measurement, status, stream, cost_nanos, charged_nanos, wholesale_nanos, \
             excess_nanos, started_at, settled_at, audio_seconds, images, video_seconds, mirror_confirmed) \
             SELECT 'bench-' || g, b.first + floor(random() * {customers})::bigint, 1 + floor(random() * 3)::bigint, 1, 'chat_completions', m, m, 'a', 100, 10, 0, 0, 'exact', 200, false, \
             1000 + (g % 997), 1000 + (g % 997), 800 + (g % 797), 0, now() - (floor(random() * 720) * interval '1 hour'), now(), 0, 0, 0, true \
             FROM generate_series(1, {records}) g, \
             (SELECT min(id) AS first FROM organizations WHERE slug LIKE 'bench-%') b, \
             LATERAL (SELECT CASE WHEN random() < 0.5 THEN 'gpt-4o-mini' ELSE 'gpt-4o' END AS m) models"
        ),
        "INSERT INTO usage_hourly (organization_id, api_key_id, model, hour_start, requests, input_tokens, output_tokens, cached_tokens, \
         cache_write_tokens, estimated_requests, cost_nanos, charged_nanos, wholesale_nanos, images, video_seconds) \
         SELECT organization_id, api_key_id, model_served, date_trunc('hour', started_at), count(*), sum(input_tokens), sum(output_tokens), \
         sum(cached_tokens), sum(cache_write_tokens), 0, sum(cost_nanos), sum(charged_nanos), sum(wholesale_nanos), 0, 0 \
         FROM usage_records WHERE request_id LIKE 'bench-%' GROUP BY 1, 2, 3, 4"
            .to_string(),
    ]
    .into_iter()
    // The partner's rollups, as the settler would have kept them (the migration's backfill).
    .chain(migrations::partner_usage_backfill(
        sea_orm::DbBackend::Postgres,
    ))
    .chain(["ANALYZE".to_string()])
    {
        db.execute_unprepared(&sql).await.unwrap();
    }
    let hourly = api.count("usage_hourly").await;
    eprintln!(
        "bench: seeded {customers} customers, {records} usage records ({hourly} hourly buckets) in {:.1} s",
        seed.elapsed().as_secs_f64()
    );
    let mut olga = team_member(&api, p, "olga@acme.example", "owner").await;
    let base = format!("/console/partners/{p}");
    let last = (customers + 49) / 50;
    let today = chrono::Utc::now().date_naive();
    let week = today - chrono::Duration::days(6);
    for (what, path) in [
        ("customer list, first page", format!("{base}/customers")),
        (
            "customer list, search",
            format!("{base}/customers?q=customer+4242"),
        ),
        (
            "customer list, last page",
            format!("{base}/customers?page={last}"),
        ),
        ("usage, 30 days by customer", format!("{base}/usage")),
        ("usage, 30 days by key", format!("{base}/usage?by=key")),
        ("usage, 30 days by group", format!("{base}/usage?by=group")),
        (
            "usage, 7 days by hour and model",
            format!("{base}/usage?granularity=hour&from={week}&to={today}&by=model"),
        ),
        (
            "usage, 7 days by hour and customer",
            format!("{base}/usage?granularity=hour&from={week}&to={today}&by=customer"),
        ),
        (
            "usage CSV, 30 days by day and customer (whole download)",
            format!("{base}/usage.csv?by=customer"),
        ),
    ] {
        let mut times = Vec::new();
        for _ in 0..7 {
            let t = Instant::now();
            let page = olga.get(&path).await;
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(
                page.status,
                200,
                "{what}: {}",
                &page.body[..page.body.len().min(500)]
            );
        }
        times.sort_by(f64::total_cmp);
        eprintln!(
            "bench: {what}: median {:.0} ms, max {:.0} ms ({} runs)",
            times[times.len() / 2],
            times[times.len() - 1],
            times.len()
        );
    }
}

/// Past the table's hundred lines, a partner's customers are listed largest first and the rest
/// are one "Other" line: the database ranks every customer by charge, sums and names only the
/// listed, and the folded line is the window's total less theirs, to the nano-dollar.
#[tokio::test]
async fn a_partners_usage_table_lists_the_largest_hundred_and_folds_the_rest() {
    use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter};
    let api = Api::start().await;
    let acme = api.owner("1000").await;
    let db = &api.state.db;
    let mut total = 0;
    for i in 1..=103i64 {
        for sql in [
            format!(
                "INSERT INTO organizations (name, slug, status, created_at, owner_email, activated_at) \
                 VALUES ('Many {i}', 'many-{i}', 'active', '2026-03-01T00:00:00Z', 'o{i}@many.example', '2026-03-01T00:00:00Z')"
            ),
            format!(
                "INSERT INTO customers (partner_id, external_id, organization_id, display_name, contact_email, billing_mode, billing_allocation_mode, allocation_cap_nanos, created_at) \
                 SELECT {}, slug, id, name, owner_email, 'prepaid', 'partner_funded', 0, '2026-03-01T00:00:00Z' FROM organizations WHERE slug = 'many-{i}'",
                acme.id
            ),
        ] {
            db.execute_unprepared(&sql).await.unwrap();
        }
        let org = entities::organizations::Entity::find()
            .filter(entities::organizations::Column::Slug.eq(format!("many-{i}")))
            .one(db)
            .await
            .unwrap()
            .unwrap();
        let cost = 1_000_000 * i;
        total += cost;
        super::console::spend(
            &api,
            org.id,
            1,
            "gpt-4o-mini",
            "2026-03-04T10:00:00Z",
            cost,
            0,
        )
        .await;
    }
    admin_api::workers::settler::drain_once(&api.state, "t")
        .await
        .unwrap();
    let mut olga = team_member(&api, acme.id, "olga@acme.example", "owner").await;
    let page = olga
        .get(&format!(
            "/console/partners/{}/usage?granularity=day&from=2026-03-01&to=2026-03-07&by=customer",
            acme.id
        ))
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    let usd = |n: i64| money::NanoUsd::from_nanos(n).to_decimal_usd().to_string();
    // The hundred largest (4 to 103), largest first; 1 to 3 folded: three requests, 6,000,000
    // nano-dollars charged.
    let at = |name: &str| page.body.find(&format!("{name}</th>"));
    for i in 4..=103 {
        assert!(at(&format!("Many {i}")).is_some(), "Many {i} listed");
    }
    assert!(at("Many 103") < at("Many 102") && at("Many 5") < at("Many 4"));
    for i in 1..=3 {
        assert!(at(&format!("Many {i}")).is_none(), "Many {i} folded");
    }
    let other = format!(
        "Other (3 more; all in the CSV)</th><td class=\"num\">3</td><td class=\"num\">300</td><td class=\"num\">30</td><td class=\"num\"><data value=\"{0}\" title=\"{0} USD\">0.006</data></td><td class=\"num\"><data value=\"{0}\" title=\"{0} USD\">0.006</data></td>",
        usd(6_000_000)
    );
    assert!(page.body.contains(&other), "{}", page.body);
    assert!(page.body.contains(&format!(
        "data-figure=\"charged\"><data value=\"{}\"",
        usd(total)
    )));
    // The CSV has every customer (streamed from the rollups in chunks), by day and by hour, and
    // the keys' and models' cells add up to the same total.
    let base = format!("/console/partners/{}/usage.csv", acme.id);
    for granularity in ["day", "hour"] {
        let csv = olga
            .get(&format!(
                "{base}?granularity={granularity}&from=2026-03-04&to=2026-03-04&by=customer"
            ))
            .await;
        assert_eq!(csv.status, 200, "{}", csv.body);
        assert_eq!(csv.header("content-type"), "text/csv; charset=utf-8");
        let rows = super::console::csv_rows(&csv.body);
        assert_eq!(rows.len(), 1 + 103, "{}", csv.body);
        assert_eq!(rows[0][2..4], ["customer_id", "customer"]);
        assert_eq!(
            rows[0][12..],
            ["charged_usd", "wholesale_usd", "margin_usd"]
        );
        let start = if granularity == "day" {
            "2026-03-04T00:00:00Z"
        } else {
            "2026-03-04T10:00:00Z"
        };
        for i in 1..=103i64 {
            let row = rows
                .iter()
                .find(|r| r[3] == format!("Many {i}"))
                .unwrap_or_else(|| panic!("Many {i} in the {granularity} CSV"));
            assert_eq!(row[0], start);
            assert_eq!(row[4], "1");
            assert_eq!(row[12], usd(1_000_000 * i), "{row:?}");
        }
    }
    // A window without usage is the header alone.
    let empty = olga
        .get(&format!(
            "{base}?granularity=day&from=2026-03-05&to=2026-03-06&by=customer"
        ))
        .await;
    assert_eq!(empty.status, 200);
    assert_eq!(
        super::console::csv_rows(&empty.body).len(),
        1,
        "{}",
        empty.body
    );
    for (query, line) in [
        (
            "granularity=hour&from=2026-03-04&to=2026-03-04&by=key",
            "key 1",
        ),
        (
            "granularity=day&from=2026-03-01&to=2026-03-07&by=model",
            "gpt-4o-mini",
        ),
        (
            "granularity=hour&from=2026-03-04&to=2026-03-04&by=model",
            "gpt-4o-mini",
        ),
    ] {
        let csv = olga.get(&format!("{base}?{query}")).await;
        assert_eq!(csv.status, 200, "{}", csv.body);
        let rows = super::console::csv_rows(&csv.body);
        assert_eq!(rows.len(), 2, "{query}: {}", csv.body);
        let row = &rows[1];
        assert!(row.iter().any(|f| f == line), "{query}: {row:?}");
        assert!(row.contains(&"103".to_string()), "{query}: {row:?}");
        assert_eq!(row[row.len() - 3], usd(total), "{query}: {row:?}");
    }
}

/// With more customers than the chart draws apart, the rest is one "Other" series whose share of
/// each period is the period's total less the lines drawn apart (they need no periods of their
/// own), and the totals still add up.
#[tokio::test]
async fn a_partners_chart_folds_the_smallest_customers_into_other() {
    let api = Api::start().await;
    let acme = api.owner("1000").await;
    let mut charged = 0;
    for i in 0..8i64 {
        let (_, org) = api
            .active_customer(&acme, &format!("c{i}"), 10.0, 1.0)
            .await;
        let cost = 1_000_000 * (i + 1);
        charged += cost;
        super::console::spend(&api, org, 1, "gpt-4o-mini", "2026-03-04T10:00:00Z", cost, 0).await;
    }
    admin_api::workers::settler::drain_once(&api.state, "t")
        .await
        .unwrap();
    let mut olga = team_member(&api, acme.id, "olga@acme.example", "owner").await;
    let page = olga
        .get(&format!(
            "/console/partners/{}/usage?granularity=day&from=2026-03-04&to=2026-03-04",
            acme.id
        ))
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("</span>Other</li>"), "{}", page.body);
    assert_eq!(page.body.matches("<li><span class=\"swatch").count(), 6);
    // The largest customer is drawn first; the column is one bar per series, filling the chart.
    assert!(
        page.body
            .contains("swatch s0\" aria-hidden=\"true\"></span>Org c7</li>")
    );
    assert_eq!(page.body.matches("<rect class=\"bar s").count(), 6);
    assert!(page.body.contains(&format!(
        "data-figure=\"charged\"><data value=\"{}\"",
        money::NanoUsd::from_nanos(charged).to_decimal_usd()
    )));
}
