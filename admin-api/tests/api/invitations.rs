//! Invitations and mail: an expired invitation cannot activate, and the invitation email goes out
//! over SMTP.

use super::*;

#[tokio::test]
async fn expired_invitation_cannot_activate() {
    use sea_orm::{ConnectionTrait, Statement};
    let api = Api::start().await;
    let owner = api.owner("0").await;
    let (_, created) = api.create(&owner, "late", 0.0, 1.0).await;
    let token = created["data"]["activation"]["invite_url"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    // Fifteen days later.
    api.state
        .db
        .execute_raw(Statement::from_string(
            api.state.db.get_database_backend(),
            "UPDATE invitations SET expires_at = created_at - INTERVAL '1 day'".replace(
                "created_at - INTERVAL '1 day'",
                if api.state.db.get_database_backend() == sea_orm::DbBackend::Sqlite {
                    "'2000-01-01T00:00:00+00:00'"
                } else {
                    "created_at - INTERVAL '1 day'"
                },
            ),
        ))
        .await
        .unwrap();
    let (s, _, v, _) = api
        .call(
            Method::POST,
            None,
            &format!("/invitations/{token}/accept"),
            Some(&json!({"email": "owner@late.example"})),
            None,
        )
        .await;
    assert_eq!(s, 410, "{v}");
    let id = created["data"]["customer"]["id"].as_i64().unwrap();
    let (s, v) = api.get(&owner, &format!("/customers/{id}/groups")).await;
    assert_error(s, &v, 409, "PARTNER_CUSTOMER_PENDING_ACTIVATION");
    assert_eq!(v["metadata"]["invitation_status"], "expired");
    let (_, v) = api.get(&owner, &format!("/customers/{id}")).await;
    assert_eq!(v["data"]["status"], "pending_activation");
}

/// SPEC: an invitation lives 14 days from its creation. On the service's own clock (fixed by the
/// test, no database edit): created at T, it reads `pending` and can be accepted until T + 14 days,
/// and from T + 14 days on it reads `expired` (the customer stays pending) and cannot activate.
#[tokio::test]
async fn invitation_lifetime_is_fourteen_days_from_creation() {
    use chrono::{Duration, TimeZone, Utc};
    let api = Api::start().await;
    let owner = api.owner("0").await;
    let created_at = Utc.with_ymd_and_hms(2031, 3, 1, 12, 0, 0).unwrap();
    api.state.clock.set(Some(created_at));
    let token_of = |v: &Value| {
        v["data"]["activation"]["invite_url"]
            .as_str()
            .unwrap()
            .rsplit('/')
            .next()
            .unwrap()
            .to_string()
    };
    let (_, early) = api.create(&owner, "early", 0.0, 1.0).await;
    let (_, late) = api.create(&owner, "late14", 0.0, 1.0).await;
    for v in [&early, &late] {
        assert_eq!(
            v["data"]["activation"]["invitation_expires_at"], "2031-03-15T12:00:00Z",
            "14 days after creation: {v}"
        );
        assert_eq!(v["data"]["activation"]["invitation_status"], "pending");
    }
    let accept = |token: String, email: &'static str| {
        let api = &api;
        async move { api.accept_invitation(&token, email).await }
    };
    // One second before the end: still pending, and it activates.
    api.state
        .clock
        .set(Some(created_at + Duration::days(14) - Duration::seconds(1)));
    let (s, v) = accept(token_of(&early), "owner@early.example").await;
    assert_eq!(s, 200, "{v}");
    let late_id = late["data"]["customer"]["id"].as_i64().unwrap();
    let (_, v) = api.get(&owner, &format!("/customers/{late_id}")).await;
    assert_eq!(v["data"]["activation"]["invitation_status"], "pending");
    // At 14 days: expired, refused, nothing changes.
    api.state.clock.set(Some(created_at + Duration::days(14)));
    let (_, v) = api.get(&owner, &format!("/customers/{late_id}")).await;
    assert_eq!(
        v["data"]["activation"]["invitation_status"], "expired",
        "{v}"
    );
    assert_eq!(v["data"]["status"], "pending_activation");
    let (s, _, v, _) = api
        .call(
            Method::POST,
            None,
            &format!("/invitations/{}/accept", token_of(&late)),
            Some(&json!({"email": "owner@late14.example", "password": console::PASSWORD})),
            None,
        )
        .await;
    assert_eq!(s, 410, "{v}");
    let (s, v) = api
        .get(&owner, &format!("/customers/{late_id}/groups"))
        .await;
    assert_error(s, &v, 409, "PARTNER_CUSTOMER_PENDING_ACTIVATION");
    assert_eq!(v["metadata"]["invitation_status"], "expired");
    assert_eq!(
        v["metadata"]["invitation_expires_at"],
        "2031-03-15T12:00:00Z"
    );
}

/// A one-message SMTP server on loopback: returns the DATA it received.
async fn fake_smtp() -> (u16, tokio::task::JoinHandle<String>) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    #[allow(
        clippy::disallowed_methods,
        reason = "test server owned by its JoinHandle, awaited by the test"
    )]
    let handle = tokio::spawn(async move {
        let (sock, _) = listener.accept().await.unwrap();
        let (r, mut w) = sock.into_split();
        let mut lines = BufReader::new(r).lines();
        w.write_all(b"220 fake ESMTP\r\n").await.unwrap();
        let mut data = String::new();
        let mut in_data = false;
        while let Ok(Some(line)) = lines.next_line().await {
            if in_data {
                if line == "." {
                    w.write_all(b"250 queued\r\n").await.unwrap();
                    // One message is all this server takes (a pooled client may never QUIT).
                    break;
                } else {
                    data.push_str(&line);
                    data.push('\n');
                }
                continue;
            }
            let cmd = line.to_ascii_uppercase();
            let reply: &[u8] = if cmd.starts_with("EHLO") || cmd.starts_with("HELO") {
                b"250-fake\r\n250 OK\r\n"
            } else if cmd.starts_with("DATA") {
                in_data = true;
                b"354 go ahead\r\n"
            } else if cmd.starts_with("QUIT") {
                w.write_all(b"221 bye\r\n").await.unwrap();
                break;
            } else {
                b"250 OK\r\n"
            };
            w.write_all(reply).await.unwrap();
        }
        data
    });
    (port, handle)
}

#[tokio::test]
async fn invitation_email_goes_out_over_smtp() {
    let (port, server) = fake_smtp().await;
    let mail = settings::Mail {
        smtp_url: Some(format!("smtp://127.0.0.1:{port}")),
        from: "Tollgate <no-reply@gw.example.test>".into(),
        outbox_dir: std::env::temp_dir(),
    };
    let mailer = admin_api::mail::Mailer::from_settings(&mail).unwrap();
    mailer
        .send(
            "ann@globex.example",
            "Join Globex",
            "Accept: https://gw.example.test/invitations/abc".into(),
        )
        .await
        .unwrap();
    let data = server.await.unwrap();
    assert!(data.contains("To: ann@globex.example"), "{data}");
    assert!(data.contains("Subject: Join Globex"), "{data}");
    assert!(
        data.contains("https://gw.example.test/invitations/abc"),
        "{data}"
    );
}
