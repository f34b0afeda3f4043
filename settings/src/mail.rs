//! `[mail]`: how invitation and sign-in emails leave (SMTP, or files in an outbox).

use crate::error::{ConfigError, err};
use crate::values::{EnvFn, secret};
use serde::Deserialize;
use std::fmt;

/// The section as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMail {
    pub smtp_url: Option<String>,
    pub from: Option<String>,
    pub outbox_dir: Option<String>,
}

/// How invitation emails leave: SMTP when `smtp_url` is set, else files in `outbox_dir`.
#[derive(Clone)]
pub struct Mail {
    /// `smtps://user:pass@host:465` (TLS), `smtp://…:587?tls=required` (STARTTLS) or `smtp://host:25`
    /// (plain); `None` writes to the outbox.
    pub smtp_url: Option<String>,
    pub from: String,
    pub outbox_dir: std::path::PathBuf,
}

impl fmt::Debug for Mail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mail")
            .field("smtp_url", &self.smtp_url.as_ref().map(|_| "<redacted>"))
            .field("from", &self.from)
            .field("outbox_dir", &self.outbox_dir)
            .finish()
    }
}

/// Validates `[mail]`.
pub(crate) fn validate(raw: &RawMail, env: EnvFn<'_>) -> Result<Mail, ConfigError> {
    let mail = Mail {
        smtp_url: raw
            .smtp_url
            .as_deref()
            .map(|u| secret(u, "mail.smtp_url", env))
            .transpose()?,
        from: raw
            .from
            .clone()
            .unwrap_or_else(|| "Tollgate <no-reply@localhost>".to_string()),
        outbox_dir: raw
            .outbox_dir
            .clone()
            .unwrap_or_else(|| "data/outbox".to_string())
            .into(),
    };
    if let Some(url) = &mail.smtp_url
        && !(url.starts_with("smtp://") || url.starts_with("smtps://"))
    {
        return Err(err("mail.smtp_url", "must start with smtp:// or smtps://"));
    }
    if !mail.from.contains('@') {
        return Err(err("mail.from", "must contain an email address"));
    }
    Ok(mail)
}
