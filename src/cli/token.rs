//! `kiln token create|list|revoke`: the HTTP API's team bearer tokens, straight in the queue's
//! database (only hashes are stored; see `kiln_jobs::api::token`).

use kiln_jobs::api::token;
use kiln_jobs::db::Db;

use super::DbArgs;

/// Arguments of `kiln token`.
#[derive(Debug, clap::Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub command: TokenCommand,
}

/// What `kiln token` does.
#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Create a token for a team and print it (once: only its hash is kept).
    Create {
        /// The team the token acts for; it sees and cancels only this team's jobs.
        #[arg(long)]
        team: String,
        /// A note on who or what uses the token (shown by `kiln token list`).
        #[arg(long)]
        label: Option<String>,
        #[command(flatten)]
        db: DbArgs,
    },
    /// List tokens: team, label, created, revoked, hash prefix (never the tokens).
    List {
        #[command(flatten)]
        db: DbArgs,
    },
    /// Revoke the token whose hash starts with HASH_PREFIX (≥ 8 hex digits, from `list`).
    Revoke {
        /// The start of the token's hash, as `kiln token list` shows it.
        hash_prefix: String,
        #[command(flatten)]
        db: DbArgs,
    },
}

fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default()
}

/// Run `kiln token …`.
pub async fn run(args: TokenArgs) -> anyhow::Result<()> {
    match args.command {
        TokenCommand::Create { team, label, db } => {
            let db = Db::open(&db.target()).await?;
            let t = token::create(&db, &team, label.as_deref()).await?;
            println!("{}", t.token);
            eprintln!(
                "token for team {team} (hash {}) in {}; it is shown only now: store it as a secret \
                 (KILN_TOKEN) — `kiln token revoke {}` disables it",
                &t.hash[..12],
                db.shown(),
                &t.hash[..12]
            );
        }
        TokenCommand::List { db } => {
            let db = Db::open(&db.target()).await?;
            let list = token::list(&db).await?;
            if list.is_empty() {
                println!(
                    "no tokens in {}; `kiln token create --team T` makes one",
                    db.shown()
                );
            }
            for t in &list {
                println!(
                    "{}  {:<16} {:<20} created {}  {}",
                    &t.token_hash[..12],
                    t.team,
                    t.label.as_deref().unwrap_or("-"),
                    time(t.created_at),
                    t.revoked_at
                        .map(|r| format!("revoked {}", time(r)))
                        .unwrap_or_else(|| "active".into())
                );
            }
        }
        TokenCommand::Revoke { hash_prefix, db } => {
            let db = Db::open(&db.target()).await?;
            let t = token::revoke(&db, &hash_prefix).await?;
            println!(
                "revoked {} (team {}{})",
                &t.token_hash[..12],
                t.team,
                t.label
                    .as_deref()
                    .map(|l| format!(", {l}"))
                    .unwrap_or_default()
            );
        }
    }
    Ok(())
}
