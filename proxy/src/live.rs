//! The configuration a live reload swaps ([`Live`]) and the reload itself.
//!
//! A reload (`SIGHUP`, or `proxy --config FILE --reload`) re-reads the configuration file. What
//! changes for calls that start afterwards: `[[models]]` (prices included), `[[accounts]]`,
//! `[[groups]]` (features and per-key limits included), `[routing]` and
//! `money.default_output_tokens`. Everything else (listen addresses, threads, environment, public
//! URL, body limits and timeouts, stores, pepper, mail, payments, metrics, admin, video and the
//! other `[money]` keys) keeps its start-up value until a restart; a reload that changes those
//! applies the rest and reports each such key. An invalid file changes nothing. The swap is one
//! pointer: a call keeps the [`Live`] it started with until it is settled, so calls in flight
//! finish on the configuration they started with. Accounts keep their capacity estimates across a
//! reload (matched by id).

use crate::classify::Route;
use crate::models::Router;
use crate::upstream::Accounts;
use crate::wire::cells;
use settings::Settings;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The part of the configuration a reload swaps: the settings and the tables built from them.
pub(crate) struct Live {
    /// The settings in force (the sections a reload cannot change hold their start-up values).
    pub settings: Arc<Settings>,
    pub accounts: Accounts,
    pub router: Router,
}

impl Live {
    /// The tables of `settings`; account capacity estimates carried over from `previous`.
    pub fn build(settings: Arc<Settings>, previous: Option<&Live>) -> Live {
        let recovery = Duration::from_millis(settings.routing.health_recovery_ms);
        let accounts = Accounts::new(&settings.accounts, recovery);
        if let Some(old) = previous {
            for u in accounts.all() {
                if let Some(before) = old
                    .accounts
                    .all()
                    .iter()
                    .find(|o| o.account.id == u.account.id)
                {
                    u.estimate.inherit(&before.estimate);
                }
            }
        }
        let router = Router::new(&settings, accounts.all());
        Live {
            settings,
            accounts,
            router,
        }
    }

    /// A token count goes only to accounts that count in the client's format (a count translated
    /// to another API would be a generation): keeps those in `order`; `false` when none is left.
    pub fn keep_counting_accounts(&self, route: Route, order: &mut Vec<usize>) -> bool {
        order.retain(|&i| {
            self.accounts
                .get(i)
                .is_some_and(|u| cells::target(u.account.provider, route) == route.format())
        });
        !order.is_empty()
    }

    /// The formats spoken to the accounts of `order` for a call on `route`, in order.
    pub fn targets(&self, route: Route, order: &[usize]) -> Vec<Option<translate::Format>> {
        order
            .iter()
            .filter_map(|&i| self.accounts.get(i))
            .map(|u| cells::target(u.account.provider, route))
            .collect()
    }

    /// How the bodies of a call of `caller` are made: the output cap a translation adds when the
    /// target requires one, and whether the key's group adapts Codex-style payloads (`codex`).
    pub fn body_options(&self, caller: &opstate::KeyRecord) -> cells::BodyOptions {
        cells::BodyOptions {
            default_max_tokens: self.settings.money.default_output_tokens,
            codex: self.router.adapts_codex(caller.group_id),
        }
    }
}

/// The outcome of the last reload, for `/readyz` and the logs.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReloadState {
    /// When the configuration in force was loaded (Unix seconds).
    pub loaded_at: u64,
    /// The last reload: when, and its error (`None`: it applied).
    pub last: Option<(u64, Option<String>)>,
    /// Keys the last applied reload changed that need a restart.
    pub needs_restart: Vec<String>,
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `new` with every section a reload cannot change taken from `running`, and the paths of those
/// that differ (they need a restart).
pub(crate) fn merge(running: &Settings, new: &Settings) -> (Settings, Vec<String>) {
    let mut merged = new.clone();
    let mut restart = Vec::new();
    let mut keep = |path: &str, differs: bool| {
        if differs {
            restart.push(path.to_string());
        }
    };
    let dbg = |v: &dyn std::fmt::Debug| format!("{v:?}");
    keep("server", dbg(&running.server) != dbg(&new.server));
    keep("admin", dbg(&running.admin) != dbg(&new.admin));
    keep("metrics", dbg(&running.metrics) != dbg(&new.metrics));
    keep("database", dbg(&running.database) != dbg(&new.database));
    keep("redis", dbg(&running.redis) != dbg(&new.redis));
    keep(
        "security.key_pepper",
        running.security.key_pepper != new.security.key_pepper,
    );
    // Debug output redacts secrets: those are compared themselves.
    keep(
        "mail",
        dbg(&running.mail) != dbg(&new.mail) || running.mail.smtp_url != new.mail.smtp_url,
    );
    let stripe_secrets = |p: &settings::Payments| {
        p.stripe
            .as_ref()
            .map(|s| (s.secret_key.clone(), s.webhook_secret.clone()))
    };
    keep(
        "payments",
        dbg(&running.payments) != dbg(&new.payments)
            || stripe_secrets(&running.payments) != stripe_secrets(&new.payments),
    );
    keep("video", dbg(&running.video) != dbg(&new.video));
    keep(
        "money.hold_ttl_ms",
        running.money.hold_ttl_ms != new.money.hold_ttl_ms,
    );
    keep(
        "money.reconcile_interval_ms",
        running.money.reconcile_interval_ms != new.money.reconcile_interval_ms,
    );
    merged.server = running.server.clone();
    merged.admin = running.admin.clone();
    merged.metrics = running.metrics.clone();
    merged.database = running.database.clone();
    merged.redis = running.redis.clone();
    merged.security = running.security.clone();
    merged.mail = running.mail.clone();
    merged.payments = running.payments.clone();
    merged.video = running.video.clone();
    merged.money.hold_ttl_ms = running.money.hold_ttl_ms;
    merged.money.reconcile_interval_ms = running.money.reconcile_interval_ms;
    (merged, restart)
}

#[cfg(test)]
mod tests {
    use super::merge;
    use settings::Settings;

    const BASE: &str = r#"
[server]
listen = "127.0.0.1:8080"
[admin]
embedded = true
[database]
url = "sqlite::memory:"
[security]
key_pepper = "0123456789abcdef"
[mail]
smtp_url = "smtp://a.example:25"
[routing]
queue_depth = 8
[[models]]
id = "m"
family = "f"
kind = "text"
input_per_mtok = 1
output_per_mtok = 2
[[accounts]]
id = "a"
provider = "openai"
base_url = "http://127.0.0.1:9/v1"
api_key = "sk-a"
models = ["m"]
[[groups]]
id = 1
name = "G"
product_code = "g"
models = ["m"]
wholesale_rate_multiplier = 1
"#;

    fn parse(text: &str) -> Settings {
        Settings::parse(text, &|_| None).unwrap()
    }

    #[test]
    fn reloadable_sections_come_from_the_file_and_the_rest_is_kept_and_reported() {
        let running = parse(BASE);
        let same = merge(&running, &parse(BASE));
        assert!(same.1.is_empty(), "{:?}", same.1);
        let edited = BASE
            .replace("queue_depth = 8", "queue_depth = 9")
            .replace("output_per_mtok = 2", "output_per_mtok = 3")
            .replace("listen = \"127.0.0.1:8080\"", "listen = \"127.0.0.1:8081\"")
            .replace("smtp://a.example:25", "smtp://b.example:25");
        let (merged, restart) = merge(&running, &parse(&edited));
        assert_eq!(restart, ["server", "mail"], "a secret's change is seen too");
        assert_eq!(merged.routing.queue_depth, 9);
        assert_eq!(
            merged.models[0].prices.output_per_mtok,
            parse(&edited).models[0].prices.output_per_mtok
        );
        assert_eq!(merged.server.listen.port(), 8080, "kept until a restart");
        assert_eq!(merged.mail.smtp_url.as_deref(), Some("smtp://a.example:25"));
    }
}
