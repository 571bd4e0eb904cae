//! `kiln`: command-line front end. Parses arguments (clap), sets up logging, and maps errors to exit
//! codes in one place; the work is done by the library crates.

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    // `kiln jobs | head` must end quietly like other Unix tools instead of panicking in println!,
    // so printing commands take the default SIGPIPE action. Commands that hold network
    // connections (object storage, the database, HTTP clients) keep Rust's default of ignoring
    // it: a peer that drops a connection must be an error the stage can retry, never a death by
    // signal.
    if !args.command.holds_connections() {
        // SAFETY: changing a signal action at start-up, before any thread exists.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    cli::init_logging(&args.log_format);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    // The worker handles its own signals (stop claiming, hand its stages back).
    if !matches!(args.command, cli::Command::Worker(_)) {
        rt.spawn(watch_signals());
    }
    match rt.block_on(cli::dispatch(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // Print the whole cause chain: the top line says what failed, the rest says why.
            eprintln!("error: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            let interrupted = e.chain().any(|c| {
                let inner = c
                    .downcast_ref::<kiln_pipeline::Error>()
                    .or_else(|| c.downcast_ref::<Box<kiln_pipeline::Error>>().map(|b| &**b));
                matches!(inner, Some(kiln_pipeline::Error::Interrupted { .. }))
            });
            // 128 + SIGINT, as a shell reports a process stopped by Ctrl-C.
            std::process::ExitCode::from(if interrupted { 130 } else { 1 })
        }
    }
}

/// SIGINT / SIGTERM: the first asks a running training loop to checkpoint and stop after its
/// current step (`kiln_pipeline::interrupt`); with nothing checkpointable running, or on a second
/// signal, the process exits at once with status 130.
async fn watch_signals() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return;
    };
    let mut asked = false;
    loop {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        if asked {
            eprintln!("\nstopped at once (a training step in progress is lost)");
            std::process::exit(130);
        }
        if !kiln_pipeline::interrupt::request_stop() {
            eprintln!(
                "\nstopped: this stage cannot checkpoint, so if it runs again it starts over; \
                 the stages finished before it are kept"
            );
            std::process::exit(130);
        }
        asked = true;
        eprintln!(
            "\nstopping after the current training step and writing a checkpoint, or, if \
             training is done, after the stage is saved (send the signal again to quit at once)"
        );
    }
}
