//! Running the external engines the `reconstruct` stage calls (COLMAP, ffmpeg, ffprobe): finding
//! the binary, recording each command line, streaming its output to a log file and to a callback
//! (for progress), and turning a failure into an error that names the command and its log.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{Error, Result};

/// One external program: the name users know it by and the binary to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tool {
    /// Name used in messages and logs, e.g. `colmap`.
    pub name: &'static str,
    /// Binary to execute: `$<env>` when set, else `name` looked up on `PATH`.
    pub program: PathBuf,
    /// How to install it, for the error when it is missing.
    install_hint: &'static str,
    /// The environment variable that overrides the binary, when it is set.
    overridden_by: Option<String>,
}

impl Tool {
    /// The tool `name`, overridden by the environment variable `env` (a path to the binary).
    pub fn new(name: &'static str, env: &str, install_hint: &'static str) -> Tool {
        let set = std::env::var_os(env).filter(|v| !v.is_empty());
        Tool {
            name,
            program: set
                .clone()
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(name)),
            install_hint,
            overridden_by: set.map(|_| env.to_string()),
        }
    }

    /// `colmap` (`$KILN_COLMAP` overrides).
    pub fn colmap() -> Tool {
        Tool::new(
            "colmap",
            "KILN_COLMAP",
            "install COLMAP (Debian/Ubuntu: `apt-get install colmap`) or set KILN_COLMAP to its path",
        )
    }

    /// `ffmpeg` (`$KILN_FFMPEG` overrides).
    pub fn ffmpeg() -> Tool {
        Tool::new(
            "ffmpeg",
            "KILN_FFMPEG",
            "install ffmpeg (Debian/Ubuntu: `apt-get install ffmpeg`) or set KILN_FFMPEG to its path",
        )
    }

    /// `ffprobe` (`$KILN_FFPROBE` overrides).
    pub fn ffprobe() -> Tool {
        Tool::new(
            "ffprobe",
            "KILN_FFPROBE",
            "install ffmpeg, which ships ffprobe (Debian/Ubuntu: `apt-get install ffmpeg`), or set \
             KILN_FFPROBE to its path",
        )
    }

    /// A command line for this tool with `args`.
    pub fn command<S: AsRef<str>>(&self, args: &[S]) -> CommandLine {
        CommandLine {
            tool: self.clone(),
            args: args.iter().map(|a| a.as_ref().to_string()).collect(),
        }
    }

    fn spawn_error(&self, e: std::io::Error) -> Error {
        let problem = match (&self.overridden_by, e.kind()) {
            (Some(env), std::io::ErrorKind::NotFound) => format!(
                "{env} is set to `{}`, which does not exist; point it at the {} binary or unset \
                 it",
                self.program.display(),
                self.name
            ),
            (None, std::io::ErrorKind::NotFound) => format!(
                "{} is not installed (not on PATH); {}",
                self.name, self.install_hint
            ),
            _ => format!("could not start {}: {e}", self.name),
        };
        Error::Input {
            path: self.program.clone(),
            field: "program".into(),
            problem,
        }
    }
}

/// A command about to run, kept for the stage's record of what it ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandLine {
    tool: Tool,
    /// Arguments after the program.
    pub args: Vec<String>,
}

impl CommandLine {
    /// The command as one shell-like line (arguments with spaces quoted), for records and logs.
    pub fn display(&self) -> String {
        std::iter::once(self.tool.program.display().to_string())
            .chain(self.args.iter().map(|a| {
                if a.is_empty() || a.contains([' ', '\'', '"', '(', ')', '\\']) {
                    format!("'{}'", a.replace('\'', "'\\''"))
                } else {
                    a.clone()
                }
            }))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Run to completion, writing its stdout and stderr lines to `log` (created or appended to,
    /// after a header with the command line) and passing each line to `on_line`.
    ///
    /// # Errors
    /// [`Error::Input`] naming the tool and saying how to install it when the binary is missing;
    /// [`Error::Input`] naming the command, its exit status, its last output lines and `log` when it
    /// exits with a failure; [`Error::Io`] writing the log.
    pub fn run_logged(&self, log: &Path, on_line: &mut dyn FnMut(&str)) -> Result<()> {
        let mut log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| Error::io(log, e))?;
        writeln!(log_file, "$ {}", self.display()).map_err(|e| Error::io(log, e))?;
        let mut child = self.spawn_piped()?;
        let stderr = child.stderr.take().expect("stderr is piped");
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let tx_err = tx.clone();
        let err_thread = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
                if tx_err.send(line).is_err() {
                    break;
                }
            }
        });
        let stdout = child.stdout.take().expect("stdout is piped");
        let out_thread = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut tail: std::collections::VecDeque<String> = std::collections::VecDeque::new();
        for line in rx {
            writeln!(log_file, "{line}").map_err(|e| Error::io(log, e))?;
            on_line(&line);
            if tail.len() == 8 {
                tail.pop_front();
            }
            tail.push_back(line);
        }
        let _ = out_thread.join();
        let _ = err_thread.join();
        let status = child.wait().map_err(|e| Error::io(log, e))?;
        if status.success() {
            return Ok(());
        }
        Err(Error::Input {
            path: log.to_path_buf(),
            field: "run".into(),
            problem: format!(
                "`{}` failed ({status}); last output:\n{}\n(full log in {})",
                self.display(),
                Vec::from(tail).join("\n"),
                log.display()
            ),
        })
    }

    /// The command, ready to start: no stdin, Qt kept off any display (COLMAP links Qt), and
    /// killed when the thread that started it dies (Linux `PR_SET_PDEATHSIG`), so stopping Kiln
    /// never leaves COLMAP or ffmpeg running.
    fn prepared(&self) -> Command {
        let mut cmd = Command::new(&self.tool.program);
        cmd.args(&self.args)
            .env("QT_QPA_PLATFORM", "offscreen")
            .stdin(Stdio::null());
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::process::CommandExt;
            // SAFETY: the closure runs in the forked child before exec and only calls prctl,
            // which is async-signal-safe; it allocates nothing and takes no lock.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        cmd
    }

    /// Start with stdout and stderr piped.
    ///
    /// # Errors
    /// [`Error::Input`] naming the tool and how to install it when it cannot start.
    pub fn spawn_piped(&self) -> Result<std::process::Child> {
        self.prepared()
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| self.tool.spawn_error(e))
    }

    /// Run to completion and return its exit status and output, whatever the status.
    ///
    /// # Errors
    /// [`Error::Input`] naming the tool and how to install it when it cannot start.
    pub fn run_captured(&self) -> Result<std::process::Output> {
        self.prepared()
            .output()
            .map_err(|e| self.tool.spawn_error(e))
    }

    /// Run to completion and return its stdout; stderr is kept for the error message.
    ///
    /// # Errors
    /// As [`Self::run_logged`], without a log file.
    pub fn output(&self) -> Result<Vec<u8>> {
        let out = self.run_captured()?;
        if out.status.success() {
            return Ok(out.stdout);
        }
        Err(Error::Input {
            path: self.tool.program.clone(),
            field: "run".into(),
            problem: format!(
                "`{}` failed ({}): {}",
                self.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binary_says_how_to_install_it() {
        let tool = Tool {
            name: "colmap",
            program: PathBuf::from("/nonexistent/kiln-test/colmap"),
            install_hint: "install COLMAP",
            overridden_by: None,
        };
        let err = tool.command(&["help"]).output().unwrap_err().to_string();
        assert!(
            err.contains("not installed") && err.contains("install COLMAP"),
            "{err}"
        );
        let via_env = Tool {
            overridden_by: Some("KILN_COLMAP".into()),
            ..tool
        };
        let err = via_env.command(&["help"]).output().unwrap_err().to_string();
        assert!(
            err.contains("KILN_COLMAP is set to `/nonexistent/kiln-test/colmap`"),
            "{err}"
        );
    }

    #[test]
    fn failing_command_names_itself_its_output_and_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("x.log");
        let tool = Tool {
            name: "sh",
            program: PathBuf::from("sh"),
            install_hint: "",
            overridden_by: None,
        };
        let mut lines = Vec::new();
        let err = tool
            .command(&["-c", "echo hello; echo oops >&2; exit 3"])
            .run_logged(&log, &mut |l| lines.push(l.to_string()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("oops") && err.contains("x.log"), "{err}");
        assert!(err.contains("exit status: 3"), "{err}");
        lines.sort();
        assert_eq!(lines, ["hello", "oops"]);
        let logged = std::fs::read_to_string(&log).unwrap();
        assert!(
            logged.starts_with("$ sh -c 'echo hello; echo oops >&2; exit 3'\n"),
            "{logged}"
        );
    }
}
