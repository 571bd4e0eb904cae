//! `kiln serve`: one web server for the job queue's HTTP API (`/api/v1`, team bearer tokens,
//! `/metrics`, `/healthz`; `kiln_jobs::api`) and the viewer pages over the ledger (the job list,
//! and per job its output tileset in CesiumJS beside its HTML report; `kiln_jobs::serve`). Who may
//! see the viewer follows the listen address and `--viewer` (`kiln_jobs::serve::access`); whether
//! API submissions may name local paths follows `--allow-local-paths` (`kiln_jobs::api::locations`).

use std::net::SocketAddr;
use std::path::PathBuf;

use kiln_jobs::api::{self, ApiConfig, LocalPaths};
use kiln_jobs::db::Db;
use kiln_jobs::ledger::Ledger;
use kiln_jobs::queue::Queue;
use kiln_jobs::serve::{self, CesiumDir, ServeConfig, ViewerAccess};

use super::DbArgs;

/// Arguments of `kiln serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on. Loopback by default. The API under /api/v1 always needs team
    /// tokens (`kiln token create`); the viewer pages depend on the address, see --viewer. Port 0
    /// picks a free port; the address is printed on stdout.
    #[arg(
        long,
        visible_alias = "listen",
        value_name = "HOST:PORT",
        default_value = "127.0.0.1:8080"
    )]
    pub addr: SocketAddr,
    #[command(flatten)]
    pub db: DbArgs,
    /// The CesiumJS build folder (node_modules/cesium/Build/Cesium after `npm i cesium@1.145.0`).
    /// Without it the viewer page says how to install CesiumJS; it is never fetched from a CDN.
    #[arg(long, value_name = "DIR", env = "KILN_CESIUM_DIR")]
    pub cesium: Option<PathBuf>,
    /// Largest accepted API request body, bytes (larger ones get 413).
    #[arg(long, value_name = "BYTES", default_value_t = api::DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// Who may see the viewer pages (job list, 3D viewer, output files). Not given: open to
    /// anyone on a loopback address (every job, including `kiln run` ones), off on any other
    /// address. `--viewer` (= token): every viewer page and file needs a team token (header
    /// `Authorization: Bearer kiln_…`, or sign in at /login, which sets an HttpOnly cookie; never
    /// put a token in a URL) and shows only that team's queued jobs; `kiln run` jobs (no team)
    /// are never shown then. `off`: never serve them. `open` is refused on non-loopback
    /// addresses.
    #[arg(
        long,
        value_name = "MODE",
        num_args = 0..=1,
        default_missing_value = "token",
        value_enum
    )]
    pub viewer: Option<ViewerArg>,
    /// Let API submissions name local paths (plain paths, file://) on this machine for input and
    /// output. Off by default: a request could otherwise read or overwrite any file the server
    /// and workers can reach, so the API answers 400 and asks for s3://… (or dataset://NAME for
    /// the built-in samples). Only for single-user machines.
    #[arg(long)]
    pub allow_local_paths: bool,
    /// A TOML file giving each team the input and output prefixes it may use
    /// (`[team.NAME] inputs = ["s3://bucket/team/", "dataset://"]`, `outputs = [...]`);
    /// submissions outside them get 403, and teams it does not list may submit nothing. Without
    /// it, any team may name any location the server's credentials reach.
    #[arg(long, value_name = "FILE")]
    pub tenants: Option<std::path::PathBuf>,
}

/// `--viewer MODE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ViewerArg {
    /// Team token required; only that team's jobs.
    Token,
    /// No authentication; every job (loopback addresses only).
    Open,
    /// No viewer pages.
    Off,
}

impl From<ViewerArg> for ViewerAccess {
    fn from(v: ViewerArg) -> Self {
        match v {
            ViewerArg::Token => ViewerAccess::Token,
            ViewerArg::Open => ViewerAccess::Open,
            ViewerArg::Off => ViewerAccess::Off,
        }
    }
}

/// Serve until Ctrl-C or SIGTERM.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let access = ViewerAccess::resolve(args.addr, args.viewer.map(ViewerAccess::from))?;
    let local_paths = if args.allow_local_paths {
        LocalPaths::Allow
    } else {
        LocalPaths::Refuse
    };
    let tenants = match &args.tenants {
        Some(path) => {
            Some(api::Tenants::from_file(path).map_err(|e| anyhow::anyhow!("--tenants {e}"))?)
        }
        None => None,
    };
    let db = Db::open(&args.db.target()).await?;
    let cesium = CesiumDir::resolve(args.cesium.as_deref());
    match &cesium {
        CesiumDir::Found(_) => {}
        CesiumDir::NotConfigured => eprintln!(
            "note: no CesiumJS build (--cesium / KILN_CESIUM_DIR): job pages show install steps \
             instead of the 3D view (npm i cesium@1.145.0, then \
             KILN_CESIUM_DIR=$PWD/node_modules/cesium/Build/Cesium)"
        ),
        CesiumDir::Missing(d) => eprintln!(
            "warning: {} has no Cesium.js; point --cesium / KILN_CESIUM_DIR at \
             node_modules/cesium/Build/Cesium (npm i cesium@1.145.0)",
            d.display()
        ),
    }
    anyhow::ensure!(
        args.max_body_bytes > 0,
        "--max-body-bytes must be at least 1"
    );
    let relative_base =
        std::env::current_dir().map_err(|source| serve::Error::CurrentDir { source })?;
    let ledger_path = db.shown().to_string();
    let viewer = serve::router(ServeConfig {
        ledger: Ledger::with_db(db.clone()),
        cesium,
        relative_base: relative_base.clone(),
        access,
    });
    match access {
        ViewerAccess::Open => {}
        ViewerAccess::Token => eprintln!(
            "note: viewer pages need a team token (sign in at /login, or Authorization: Bearer)"
        ),
        ViewerAccess::Off => eprintln!(
            "note: viewer pages are off on {}, which is not loopback; --viewer serves them to \
             holders of a team token",
            args.addr
        ),
    }
    if local_paths == LocalPaths::Allow {
        eprintln!(
            "warning: --allow-local-paths: API clients may read and write any path this server \
             and its workers can reach"
        );
    }
    let app = viewer.merge(api::router(ApiConfig {
        queue: Queue::with_db(db.clone()),
        ledger: Ledger::with_db(db),
        max_body_bytes: args.max_body_bytes,
        relative_base,
        local_paths,
        tenants,
    }));
    api::serve(args.addr, app, |addr| {
        // Tests and scripts read this line to learn the port when --addr has port 0.
        println!(
            "serving http://{addr}/ (ledger {ledger_path}; API at http://{addr}/api/v1); Ctrl-C stops"
        );
    })
    .await?;
    Ok(())
}
