//! `kiln serve`: a local web server over the ledger — the job list, and per job its output tileset
//! in CesiumJS beside its HTML report. The server itself is `kiln_jobs::serve`.

use std::net::SocketAddr;
use std::path::PathBuf;

use kiln_jobs::ledger::Ledger;
use kiln_jobs::serve::{self, CesiumDir, ServeConfig};

use super::DbArgs;

/// Arguments of `kiln serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on (loopback by default: the server has no authentication). Port 0
    /// picks a free port; the address is printed on stdout.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    #[command(flatten)]
    pub db: DbArgs,
    /// The CesiumJS build folder (node_modules/cesium/Build/Cesium after `npm i cesium@1.145.0`).
    /// Without it the viewer page says how to install CesiumJS; it is never fetched from a CDN.
    #[arg(long, value_name = "DIR", env = "KILN_CESIUM_DIR")]
    pub cesium: Option<PathBuf>,
}

/// Serve until Ctrl-C.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let ledger = Ledger::connect(&args.db.target()).await?;
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
    let relative_base =
        std::env::current_dir().map_err(|source| serve::Error::CurrentDir { source })?;
    let ledger_path = ledger.path().to_string();
    let config = ServeConfig {
        ledger,
        cesium,
        relative_base,
    };
    serve::serve(args.addr, config, |addr| {
        // Tests and scripts read this line to learn the port when --addr has port 0.
        println!("serving http://{addr}/ (ledger {ledger_path}); Ctrl-C stops");
    })
    .await?;
    Ok(())
}
