//! What a write leaves to do once its transaction committed ([`Effect`]: a mail, a wallet
//! mirror's credit, a key's publication) and the one place that does it ([`apply`]). A service
//! returns its write as [`Written`]; the surface in front of it (the partner API's idempotent
//! write, a console form) commits and then applies. Nothing here undoes a committed write: a
//! failure is logged and repaired by the keepers (the directory rebuild, the wallet reload).

use crate::state::AppState;

/// Something to do once the write committed.
pub enum Effect {
    /// Send an email (an invitation). A failure is logged, never undoes the write.
    Email {
        to: String,
        subject: String,
        body: String,
    },
    /// Make a key usable at the gateway.
    PublishKey {
        hash: String,
        record: opstate::KeyRecord,
    },
    /// Credit an organization's wallet mirror with money the ledger just credited.
    CreditWallet {
        org: i64,
        amount: money::NanoUsd,
        reference: String,
    },
    /// Nothing after a commit; if the commit fails, the organization's wallet mirror (already
    /// debited) is reloaded from the ledger.
    ReloadWalletIfAborted { org: i64 },
}

/// A write done inside its transaction: what it answers, the same answer without its secrets
/// (what a surface may keep or replay: no key, no invitation link), and what to do once the
/// transaction committed.
pub struct Written<T> {
    pub data: T,
    pub stored: T,
    pub effects: Vec<Effect>,
}

impl<T: Clone> Written<T> {
    /// A write with nothing secret in its answer.
    pub fn plain(data: T) -> Written<T> {
        Written::with_effects(data, Vec::new())
    }

    /// A write with nothing secret in its answer and `effects` to apply after the commit.
    pub fn with_effects(data: T, effects: Vec<Effect>) -> Written<T> {
        Written {
            stored: data.clone(),
            data,
            effects,
        }
    }
}

/// Applies a committed write's effects (mails, wallet credits, key publications); failures are
/// logged and repaired by the keepers, never undo the write.
pub async fn apply(state: &AppState, effects: Vec<Effect>) {
    for effect in effects {
        match effect {
            Effect::Email { to, subject, body } => {
                if let Err(e) = state.mailer.send(&to, &subject, body).await {
                    tracing::error!(error = %e, subject, "email could not be sent");
                }
            }
            Effect::CreditWallet {
                org,
                amount,
                reference,
            } => {
                match state.stores.wallets.adjust(org, amount, &reference).await {
                    Ok(opstate::Adjustment::Applied { .. } | opstate::Adjustment::Duplicate) => {}
                    // A missing mirror is rebuilt from the ledger, which has the credit.
                    Ok(opstate::Adjustment::Missing | opstate::Adjustment::Insufficient { .. })
                    | Err(_) => {
                        tracing::warn!(
                            org,
                            "wallet mirror not credited; it will be reloaded from the ledger"
                        );
                        state.wallet_stale(org);
                    }
                }
            }
            Effect::ReloadWalletIfAborted { .. } => {}
            Effect::PublishKey { hash, record } => {
                if let Err(e) = state.stores.keys.publish(&hash, &record).await {
                    tracing::error!(error = %e, key_id = record.key_id, "key not published; the directory rebuild will publish it");
                    state.directory_stale();
                }
            }
        }
    }
}
