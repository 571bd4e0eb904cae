//! Shared test harness: run the real `kiln` binary in a temporary directory with its own ledger and
//! work root, and validate GLBs with the Khronos validator.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh sandbox: temp dir holding `work/`, `ledger.sqlite` and outputs.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Write a job file into the sandbox and return its path.
    pub fn job(&self, name: &str, toml: &str) -> PathBuf {
        let p = self.path().join(format!("{name}.toml"));
        std::fs::write(&p, toml).unwrap();
        p
    }

    /// Run `kiln ARGS` with the sandbox's ledger and work root.
    pub fn kiln(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(args)
            .env("KILN_HOME", self.path())
            .env("KILN_DB", self.path().join("ledger.sqlite"))
            .env("RUST_LOG", "warn")
            .current_dir(self.path())
            .output()
            .expect("run kiln")
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Assert success, printing both streams otherwise.
pub fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "kiln failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        o.status,
        stdout(o),
        stderr(o)
    );
}

/// The job id printed by `kiln run` ("job <id> succeeded").
pub fn job_id(o: &Output) -> String {
    let out = stdout(o);
    out.lines()
        .find_map(|l| {
            l.strip_prefix("job ")
                .and_then(|r| r.split_whitespace().next())
        })
        .unwrap_or_else(|| panic!("no job id in output:\n{out}"))
        .to_string()
}

/// Run the Khronos Avocado mesh job with the four-level LOD chain (as `datasets/jobs/avocado.toml`;
/// output `out/avocado` in the sandbox); returns its job id.
pub fn run_avocado(sb: &Sandbox) -> String {
    let gltf = dataset("mesh-khronos-gltf-samples").join("Avocado/glTF/Avocado.gltf");
    let job = sb.job(
        "avocado",
        &format!(
            "name = \"avocado\"\nkind = \"mesh\"\ninput = \"{}\"\noutput = \"out/avocado\"\n\
             [decimate]\nratios = [1.0, 0.5, 0.25, 0.125]\n",
            gltf.display()
        ),
    );
    let o = sb.kiln(&["run", job.to_str().unwrap()]);
    ok(&o);
    job_id(&o)
}

/// A dataset's folder, through the same resolver the binary uses.
pub fn dataset(name: &str) -> PathBuf {
    kiln_datasets::resolve(name).unwrap_or_else(|e| panic!("{e}"))
}

/// All files under `dir` with extension `ext`. A folder that vanishes during the walk (a running
/// job renaming `<stage>.partial/`) is skipped.
pub fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == ext) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Run the Khronos glTF validator on every GLB (0 errors required, ignoring only unknown
/// `KHR_gaussian_splatting:*` attribute semantics). In CI (`CI=true`) a missing validator fails the
/// test; locally it is skipped with a message.
pub fn validate_glbs(files: &[PathBuf]) {
    assert!(!files.is_empty(), "no GLB files to validate");
    let node_path = std::env::var("KILN_GLTF_VALIDATOR_NODE_PATH")
        .ok()
        .or_else(|| {
            let home = std::env::var("HOME").ok()?;
            let p = format!("{home}/.cache/kiln-ci/node/node_modules");
            Path::new(&p).join("gltf-validator").exists().then_some(p)
        });
    let Some(node_path) = node_path else {
        assert!(
            std::env::var("CI").is_err(),
            "gltf-validator is not installed; .ci/run installs it"
        );
        eprintln!("SKIP glTF validation: gltf-validator not installed (run .ci/run once)");
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/validate_gltf.mjs");
    let o = Command::new("node")
        .arg(script)
        .args(files)
        .env("NODE_PATH", &node_path)
        .output()
        .expect("run node");
    assert!(
        o.status.success(),
        "gltf-validator reported errors:\n{}\n{}",
        stdout(&o),
        stderr(&o)
    );
}

/// Give `to` (created) the regular files of the folder `from`, hard-linked where the file system
/// allows and copied otherwise. Not a symbolic link to `from`: a link out of a job's input is
/// refused (issue 41).
pub fn link_files(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if src.is_file() && std::fs::hard_link(&src, &dst).is_err() {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}
