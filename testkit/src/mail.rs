//! The development outbox (a directory of `.eml` files): the codes mailed to an address, and
//! an invitation accepted the way a program does (issue 42).

/// The verification codes mailed to `to` in `outbox` (a directory of `.eml` files: the
/// development mailer), oldest first: the line of 8 digits alone in each mail titled "Your
/// Tollgate verification code" (issue 42).
pub fn mailed_codes(outbox: &std::path::Path, to: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(outbox) else {
        return Vec::new();
    };
    let mut found: Vec<(std::time::SystemTime, String)> = dir
        .filter_map(Result::ok)
        .filter_map(|e| {
            let when = e.metadata().and_then(|m| m.modified()).ok()?;
            let text = std::fs::read_to_string(e.path()).ok()?;
            let text = text.replace("=\r\n", "").replace("=\n", "");
            let to_line = text
                .lines()
                .find(|l| l.to_ascii_lowercase().starts_with("to:"))?
                .to_ascii_lowercase();
            if !to_line.contains(&to.to_ascii_lowercase()) || !text.contains("verification code") {
                return None;
            }
            let code = text
                .lines()
                .map(str::trim)
                .find(|l| l.len() == 8 && l.bytes().all(|b| b.is_ascii_digit()))?;
            Some((when, code.to_string()))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, c)| c).collect()
}

/// The newest code mailed to `to` once more than `known` were (the mail is written just after
/// the answer that sent it, by a task of the same runtime); panics after 10 seconds.
pub async fn next_code(outbox: &std::path::Path, to: &str, known: usize) -> String {
    for _ in 0..200 {
        let codes = mailed_codes(outbox, to);
        if codes.len() > known {
            return codes.last().cloned().unwrap_or_default();
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("no new verification code for {to} in {}", outbox.display());
}

/// The password [`accept_invitation`] signs up with.
pub const INVITEE_PASSWORD: &str = "correct horse battery staple";

/// Accepts an invitation over HTTP as a program does (DESIGN §6c): `email` and a password to
/// `accept_url` (`…/invitations/{token}/accept`) answer 202 and mail a code to the address (in
/// `outbox`); the same post with the code activates. The last answer's status and JSON (the
/// first answer's, when it was not 202).
pub async fn accept_invitation(
    http: &reqwest::Client,
    accept_url: &str,
    email: &str,
    outbox: &std::path::Path,
) -> (u16, serde_json::Value) {
    let known = mailed_codes(outbox, email).len();
    let mut body = serde_json::json!({"email": email, "password": INVITEE_PASSWORD});
    let post = async |body: &serde_json::Value| {
        let resp = http
            .post(accept_url)
            .json(body)
            .send()
            .await
            .expect("the accept post");
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(serde_json::Value::Null))
    };
    let (status, v) = post(&body).await;
    if status != 202 {
        return (status, v);
    }
    let code = next_code(outbox, &email.trim().to_ascii_lowercase(), known).await;
    body["verification_code"] = serde_json::Value::String(code);
    post(&body).await
}
