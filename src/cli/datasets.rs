//! `kiln datasets list|verify`: the sample datasets of datasets/manifest.toml.

/// Arguments of `kiln datasets`.
#[derive(Debug, clap::Args)]
pub struct DatasetsArgs {
    #[command(subcommand)]
    pub action: Action,
}

#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// List datasets and where they resolve.
    List,
    /// Check a dataset's files against its checksums.
    Verify {
        /// Dataset name from `kiln datasets list`.
        name: String,
    },
}

/// Run the action.
pub fn run(args: DatasetsArgs) -> anyhow::Result<()> {
    match args.action {
        Action::List => {
            for d in kiln_datasets::manifest()? {
                let at = kiln_datasets::resolve(&d.name)
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| "(not found)".into());
                println!("{:<32} {:<8} {}  [{}]", d.name, d.kind, at, d.license);
            }
        }
        Action::Verify { name } => {
            let n = kiln_datasets::verify(&name)?;
            println!("{name}: {n} files match SHA256SUMS");
        }
    }
    Ok(())
}
