//! `admin-api --config FILE [COMMAND]`: run the admin service, or an operator command (JSON on
//! stdout, exit 1 with a message on failure).

use admin_api::{AppState, cli, demo};
use clap::{Parser, Subcommand};
use opstate::Stores;
use settings::Settings;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use tollgate::{App, Role};

#[derive(Parser)]
#[command(
    name = "admin-api",
    about = "Tollgate admin service and operator commands",
    version
)]
struct Cli {
    /// The TOML configuration file (the same one the proxy reads).
    #[arg(long)]
    config: PathBuf,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Validate the configuration and exit.
    Check,
    /// Partner accounts.
    Partner {
        #[command(subcommand)]
        action: PartnerAction,
    },
    /// Organization billing tokens: create, rotate (the old token stops at once) or revoke.
    BillingToken {
        #[arg(value_parser = ["create", "rotate", "revoke"])]
        action: String,
        #[arg(long)]
        org: i64,
    },
    /// A customer's invitation: revoke it (the link stops working), or re-issue it (the old one
    /// revoked, a new 14-day link emailed to the contact address and printed).
    Invitation {
        #[arg(value_parser = ["revoke", "reissue"])]
        action: String,
        #[arg(long)]
        customer: i64,
    },
    /// Console people.
    User {
        #[command(subcommand)]
        action: UserAction,
    },
    /// The operator's margin per UTC day × supplier account × model (issue 47): calls, attempts,
    /// supplier usage and cost, wholesale and retail charged, margin. Days `--from` to `--to`
    /// (YYYY-MM-DD, both included, at most 92; default today).
    Margin {
        #[arg(long)]
        from: Option<String>,
        #[arg(long)]
        to: Option<String>,
    },
    /// Checks the ledger against the suppliers' own usage reports now (issue 47): every account
    /// with a `usage_report_key`, the last `[reconciliation] supplier_days` UTC days; prints each
    /// day × account × model with both sides and the drift (exit 1 when a report could not be
    /// read).
    ReconcileSuppliers,
    /// Quickstart: ensure the demo partner and its demo customer organization, and print a fresh
    /// customer key and both owners' console sign-ins.
    Demo {
        #[arg(long, default_value_t = 1)]
        group: i64,
    },
}

#[derive(Subcommand)]
enum UserAction {
    /// Mail (and print as JSON) a single-use sign-up link to join an organization (`--org`, roles
    /// owner|administrator|member) or a partner team (`--partner`, roles
    /// owner|admin|operator|viewer).
    Invite {
        #[arg(long)]
        email: String,
        #[arg(long, conflicts_with = "partner")]
        org: Option<i64>,
        #[arg(long)]
        partner: Option<i64>,
        #[arg(long)]
        role: String,
    },
}

#[derive(Subcommand)]
enum PartnerAction {
    /// Create a partner with its first token and initial funding.
    Create {
        #[arg(long)]
        name: String,
        #[arg(long)]
        min_rate_multiplier: String,
        #[arg(long, default_value = "0")]
        funding_usd: String,
        #[arg(long, default_value = "owner")]
        role: String,
        /// partner:read or partner:write (repeat or comma-separate).
        #[arg(long, required = true)]
        scope: Vec<String>,
    },
    /// Issue a new token for a partner, revoking its earlier ones.
    Token {
        #[arg(long)]
        partner: i64,
        #[arg(long, required = true)]
        scope: Vec<String>,
    },
    /// Credit partner funding (what a paid top-up does).
    Fund {
        #[arg(long)]
        partner: i64,
        #[arg(long)]
        amount_usd: String,
        /// Makes a retried command a no-op (e.g. the payment's id).
        #[arg(long)]
        reference: Option<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tollgate::logging::init("info,sea_orm_migration=warn");
    let settings = match Settings::load(&cli.config) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "{}: {e}", cli.config.display());
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "admin-api: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(settings, cli.command, cli.config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            let _ = writeln!(std::io::stderr(), "admin-api: {message}");
            ExitCode::FAILURE
        }
    }
}

/// `demo`: the quickstart's world and a fresh key of `group`, printed.
async fn demo(state: &AppState, settings: &Settings, group: i64) -> Result<(), String> {
    if settings.group(group).is_none() {
        return Err(format!("--group {group}: no such group in [[groups]]"));
    }
    let demo = demo::quickstart(state, group).await?;
    print(&serde_json::to_value(&demo).map_err(|e| e.to_string())?)
}

fn print(v: &serde_json::Value) -> Result<(), String> {
    let text = serde_json::to_string_pretty(v).map_err(|e| e.to_string())?;
    writeln!(std::io::stdout(), "{text}").map_err(|e| e.to_string())
}

async fn run(
    settings: Arc<Settings>,
    command: Option<Command>,
    config: PathBuf,
) -> Result<(), String> {
    settings.require_database().map_err(|e| e.to_string())?;
    if let Some(Command::Check) = command {
        return print(&serde_json::json!({"configuration": "ok"}));
    }
    if command.is_none() {
        // The service: partner and billing APIs, settler, reconciler, key-directory keeper.
        let mut app = App::build(settings, Role::AdminApi)
            .await
            .map_err(|e| e.to_string())?;
        // SIGHUP re-reads the groups (names, wholesale multipliers, per-key limits).
        app.reload_on_hangup(config);
        let listen = app.addresses().admin;
        tracing::info!(listen = ?listen, "admin-api listening");
        return app.run_until_stopped().await.map_err(|e| e.to_string());
    }
    let stores = match &settings.redis {
        Some(r) => Stores::redis_at(&r.url, &r.cluster, &r.key_prefix)
            .await
            .map_err(|e| format!("redis: {e}"))?,
        None => Stores::memory(),
    };
    let state: AppState = AppState::connect(settings.clone(), stores).await?;
    match command {
        Some(Command::Check) => Ok(()),
        Some(Command::Partner {
            action:
                PartnerAction::Create {
                    name,
                    min_rate_multiplier,
                    funding_usd,
                    role,
                    scope,
                },
        }) => {
            let new =
                cli::NewPartner::parse(&name, &min_rate_multiplier, &funding_usd, &role, &scope)?;
            print(&cli::partner_create(&state, new).await?)
        }
        Some(Command::Partner {
            action: PartnerAction::Token { partner, scope },
        }) => print(&cli::partner_token(&state, partner, &scope).await?),
        Some(Command::Partner {
            action:
                PartnerAction::Fund {
                    partner,
                    amount_usd,
                    reference,
                },
        }) => print(&cli::partner_fund(&state, partner, &amount_usd, reference.as_deref()).await?),
        Some(Command::BillingToken { action, org }) => {
            print(&cli::billing_token(&state, &action, org).await?)
        }
        Some(Command::User {
            action:
                UserAction::Invite {
                    email,
                    org,
                    partner,
                    role,
                },
        }) => print(&cli::user_invite(&state, &email, org, partner, &role).await?),
        Some(Command::Invitation { action, customer }) => {
            print(&cli::invitation(&state, &action, customer).await?)
        }
        Some(Command::Margin { from, to }) => {
            print(&cli::margin(&state, from.as_deref(), to.as_deref()).await?)
        }
        Some(Command::ReconcileSuppliers) => print(&cli::reconcile_suppliers(&state).await?),
        Some(Command::Demo { group }) => demo(&state, &settings, group).await,
        None => Ok(()),
    }
}
