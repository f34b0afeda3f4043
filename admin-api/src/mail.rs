//! Outgoing email (invitations). SMTP through `lettre` when `mail.smtp_url` is set; otherwise each
//! message is written as an `.eml` file to `mail.outbox_dir` and its path logged, so the embedded
//! default and tests can read what would have been sent.

use lettre::message::{Mailbox, header::ContentType};
use lettre::{AsyncFileTransport, AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use settings::Mail;
use std::path::PathBuf;

/// Where mail goes.
pub enum Mailer {
    Smtp {
        transport: AsyncSmtpTransport<Tokio1Executor>,
        from: Mailbox,
    },
    Outbox {
        transport: AsyncFileTransport<Tokio1Executor>,
        dir: PathBuf,
        from: Mailbox,
    },
}

/// Why a message could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum MailError {
    #[error("invalid address: {0}")]
    Address(String),
    #[error("could not build the message: {0}")]
    Build(String),
    #[error("could not deliver the message: {0}")]
    Deliver(String),
}

impl Mailer {
    /// Builds the mailer the configuration asks for. The outbox directory is created.
    pub fn from_settings(mail: &Mail) -> Result<Mailer, MailError> {
        let from: Mailbox = mail
            .from
            .parse()
            .map_err(|e| MailError::Address(format!("mail.from: {e}")))?;
        match &mail.smtp_url {
            Some(url) => {
                let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
                    .map_err(|e| MailError::Build(format!("mail.smtp_url: {e}")))?
                    .build();
                Ok(Mailer::Smtp { transport, from })
            }
            None => {
                std::fs::create_dir_all(&mail.outbox_dir)
                    .map_err(|e| MailError::Build(format!("mail.outbox_dir: {e}")))?;
                Ok(Mailer::Outbox {
                    transport: AsyncFileTransport::new(&mail.outbox_dir),
                    dir: mail.outbox_dir.clone(),
                    from,
                })
            }
        }
    }

    /// Sends a plain-text message (ASCII as 7-bit text, anything else quoted-printable: never
    /// base64, so a code or a link stays a line of the mail however many names beyond ASCII it
    /// carries).
    pub async fn send(&self, to: &str, subject: &str, body: String) -> Result<(), MailError> {
        let to: Mailbox = to.parse().map_err(|e| MailError::Address(format!("{e}")))?;
        let from = match self {
            Mailer::Smtp { from, .. } | Mailer::Outbox { from, .. } => from.clone(),
        };
        let message = Message::builder()
            .from(from)
            .to(to)
            .subject(subject)
            .header(ContentType::TEXT_PLAIN)
            .body(readable_body(body))
            .map_err(|e| MailError::Build(e.to_string()))?;
        match self {
            Mailer::Smtp { transport, .. } => {
                transport
                    .send(message)
                    .await
                    .map_err(|e| MailError::Deliver(e.to_string()))?;
                tracing::info!(subject, "email sent over SMTP");
            }
            Mailer::Outbox { transport, dir, .. } => {
                let id = transport
                    .send(message)
                    .await
                    .map_err(|e| MailError::Deliver(e.to_string()))?;
                tracing::info!(subject, path = %dir.join(format!("{id}.eml")).display(), "email written to the outbox");
            }
        }
        Ok(())
    }
}

/// A mail body in 7-bit text when it is ASCII, else quoted-printable.
fn readable_body(body: String) -> lettre::message::Body {
    use lettre::message::Body;
    use lettre::message::header::ContentTransferEncoding;
    if body.is_ascii() {
        Body::new(body)
    } else {
        Body::new_with_encoding(body, ContentTransferEncoding::QuotedPrintable)
            .unwrap_or_else(Body::new)
    }
}
