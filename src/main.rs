//! `kiln`: command-line front end. Parses arguments (clap), sets up logging, and maps errors to exit
//! codes in one place; the work is done by the library crates.

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    // `kiln … | head` must end quietly like other Unix tools instead of panicking in println!.
    // SAFETY: restoring the default SIGPIPE action at start-up, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let args = cli::Cli::parse();
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
    match rt.block_on(cli::dispatch(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // Print the whole cause chain: the top line says what failed, the rest says why.
            eprintln!("error: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            std::process::ExitCode::from(1)
        }
    }
}
