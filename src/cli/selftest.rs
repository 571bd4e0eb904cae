//! `kiln selftest [--device cuda[:N]|emulator]`: the CUDA kernels against the CPU twin on seeded
//! random scenes — images, every gradient, a few optimisation steps — printed as JSON; exit 1 on
//! any mismatch (kiln_kernels::selftest).

use std::path::PathBuf;

use anyhow::Context;

/// Arguments of `kiln selftest`.
#[derive(Debug, clap::Args)]
pub struct SelftestArgs {
    /// Device to check against the CPU: `cuda`, `cuda:N`, or `emulator` (the CUDA kernels compiled
    /// as C++ and run on the CPU; needs g++, slow, small scenes only).
    #[arg(long, default_value = "cuda")]
    pub device: String,
    /// Also run a 20,000-splat 640×360 scene (GPU only: far too slow on the emulator).
    #[arg(long)]
    pub large: bool,
    /// Optimisation steps compared per scene (≥ 1).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub steps: u64,
    /// Also write the JSON report to this file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// Run the selftest; exits the process with status 1 when a tensor is out of tolerance.
pub fn run(args: SelftestArgs) -> anyhow::Result<()> {
    if args.large && args.device.trim().eq_ignore_ascii_case("emulator") {
        anyhow::bail!(
            "--large is for a real GPU: its 20,000-splat scene takes hours on the emulator; drop \
             --large, or use --device cuda on a GPU machine"
        );
    }
    let renderer = kiln_kernels::selftest::open_device(&args.device)
        .with_context(|| format!("cannot open device {}", args.device))?;
    let report = kiln_kernels::selftest::run(&renderer, args.large, args.steps as usize)?;
    let json = serde_json::to_string_pretty(&report)?;
    println!("{json}");
    if let Some(path) = &args.out {
        kiln_formats::atomic_write::write_atomic(path, json.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    for scene in &report.scenes {
        for t in scene.tensors.iter().filter(|t| !t.pass) {
            eprintln!(
                "MISMATCH seed {} ({}) {}: max_abs {:.3e} at element {}, max_rel {:.3e}, {} of {} \
                 elements beyond the bound ({})",
                scene.seed,
                if scene.antialiased {
                    "antialiased"
                } else {
                    "classic"
                },
                t.tensor,
                t.max_abs,
                t.worst_index,
                t.max_rel,
                t.over_bound,
                t.elements,
                t.bound
            );
        }
    }
    if !report.pass {
        eprintln!("selftest FAILED on {}", report.device);
        std::process::exit(1);
    }
    eprintln!(
        "selftest passed on {} ({}): {} scenes",
        report.device,
        report.device_name,
        report.scenes.len()
    );
    Ok(())
}
