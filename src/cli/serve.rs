//! `kiln serve`: one web server for the job queue's HTTP API (`/api/v1`, team bearer tokens,
//! `/metrics`, `/healthz`; `kiln_jobs::api`) and the local viewer pages over the ledger (the job
//! list, and per job its output tileset in CesiumJS beside its HTML report; `kiln_jobs::serve`).

use std::net::SocketAddr;
use std::path::PathBuf;

use kiln_jobs::api::{self, ApiConfig};
use kiln_jobs::db::Db;
use kiln_jobs::ledger::Ledger;
use kiln_jobs::queue::Queue;
use kiln_jobs::serve::{self, CesiumDir, ServeConfig};

use super::DbArgs;

/// Arguments of `kiln serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on. Loopback by default: the viewer pages have no authentication (the
    /// API under /api/v1 needs team tokens from `kiln token create`). Port 0 picks a free port;
    /// the address is printed on stdout.
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
}

/// Serve until Ctrl-C or SIGTERM.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
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
    });
    let app = viewer.merge(api::router(ApiConfig {
        queue: Queue::with_db(db.clone()),
        ledger: Ledger::with_db(db),
        max_body_bytes: args.max_body_bytes,
        relative_base,
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
