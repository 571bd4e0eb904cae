//! The one rule for every path an input file names: it must stay inside the input.
//!
//! A capture, mesh or splat file names other files (transforms.json `file_path`, `mask_path`,
//! `ply_file_path`; glTF `buffers[].uri` and `images[].uri`; OBJ `mtllib`; MTL `map_*`; SOG
//! `meta.json` entries; COLMAP image names). On a shared worker those names are written by
//! whoever submitted the job, so a reader that joined them blindly would read any file the worker
//! can: another team's staged photos, a PLY elsewhere on the disk (issue 41). Every reader
//! therefore resolves every such name through [`ConfinedRoot::resolve`], and every file it finds
//! by listing a folder through [`ConfinedRoot::check_inside`]; nothing else joins a written name
//! onto a folder.
//!
//! The rule: a name is refused when it is absolute (`/x`, `\x`, `C:\x`), when its `..`
//! components climb above the root (counted lexically from the folder it is relative to), or
//! when the file or any folder on its way is a symbolic link whose target lies outside the root.
//! `..` that stays inside (`sub/../a.png`) and `./` are fine; `data:` URIs never reach this
//! module (their bytes are inline). Percent-decoding happens before (glTF), so `%2e%2e` is `..`.
//!
//! Not guaranteed: the check and the later open are two system calls, so a link swapped in
//! between them is not seen. Kiln stages inputs into a job's own work folder before reading
//! them (and refuses links out while staging), so nothing but the job itself writes there.

use std::path::{Component, Path, PathBuf};

use crate::{Error, Result};

/// The folder a job's input was staged into: every path an input file names must resolve inside
/// it ([module doc](self)).
#[derive(Debug, Clone)]
pub struct ConfinedRoot {
    /// The root as the caller spelled it: resolved paths start with it, so error messages (and
    /// the pipeline's renaming of work-folder paths back to the user's URL) keep that spelling.
    root: PathBuf,
    /// The root with every symbolic link resolved, for the containment check.
    real: PathBuf,
}

/// Why a written name was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Escape {
    /// An absolute path (`/…`, `\…`, a drive letter).
    Absolute,
    /// `..` components leave the root.
    ClimbsOut,
    /// A symbolic link on the way (or the file itself) points outside the root.
    SymlinkOut {
        /// The link, as found under the root.
        link: PathBuf,
        /// Where it leads once every link is resolved.
        target: PathBuf,
    },
}

impl std::fmt::Display for Escape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Escape::Absolute => write!(
                f,
                "is an absolute path outside the input (a job reads a copy of its input folder; \
                 an absolute path is followed only into the folder the job was given, as the \
                 same file of the copy)"
            ),
            Escape::ClimbsOut => write!(f, "climbs out with `..`"),
            Escape::SymlinkOut { link, target } => write!(
                f,
                "goes through the symbolic link {} to {}",
                link.display(),
                target.display()
            ),
        }
    }
}

impl ConfinedRoot {
    /// The root `root` (an existing folder).
    ///
    /// # Errors
    /// [`Error::NotFound`] / [`Error::Io`] when `root` cannot be resolved.
    pub fn new(root: &Path) -> Result<Self> {
        // `""` (the folder of a bare file name) is the current folder, kept unspelled so that
        // resolved paths stay as short as the caller's.
        let on_disk = if root.as_os_str().is_empty() {
            Path::new(".")
        } else {
            root
        };
        let real = std::fs::canonicalize(on_disk).map_err(|e| Error::io(on_disk, e))?;
        Ok(Self {
            root: root.to_path_buf(),
            real,
        })
    }

    /// The root for reading `path` on its own: `path` itself when it is a folder, else the folder
    /// holding it. Readers called without a root use this, so a file may name only files beside
    /// or below it.
    ///
    /// # Errors
    /// As [`ConfinedRoot::new`].
    pub fn of_input(path: &Path) -> Result<Self> {
        if path.is_dir() {
            return Self::new(path);
        }
        Self::new(path.parent().unwrap_or(Path::new("")))
    }

    /// The root, spelled as given.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// Resolve the name `written`, found in field `field` of the file `referrer`, relative to the
    /// folder `base` (inside the root): the path to open, `root/…` with `.` and `..` removed.
    /// Whether the file exists is left to the caller (readers report missing files their own way).
    ///
    /// # Errors
    /// [`Error::OutsideInput`] naming `referrer`, `field`, `written` and why ([`Escape`]).
    pub fn resolve(
        &self,
        referrer: &Path,
        field: &str,
        base: &Path,
        written: &str,
    ) -> Result<PathBuf> {
        let refuse = |why: Escape| self.refusal(referrer, field, written, why);
        if is_absolute_name(written) {
            // A tool that wrote absolute paths into the user's own folder (issue 44, trial F10):
            // the same file of the copy, checked as a relative name would be.
            return match self.in_original(written) {
                Some(relative) => self
                    .resolve(referrer, field, &self.root, &relative)
                    .map_err(|_| refuse(Escape::Absolute)),
                None => Err(refuse(Escape::Absolute)),
            };
        }
        let Some(mut inside) = self.relative_part(base) else {
            return Err(refuse(Escape::ClimbsOut));
        };
        for part in written.split(['/', '\\']) {
            match part {
                "" | "." => {}
                ".." => {
                    if inside.pop().is_none() {
                        return Err(refuse(Escape::ClimbsOut));
                    }
                }
                name => inside.push(name.to_string()),
            }
        }
        let mut path = self.root.clone();
        path.extend(&inside);
        if let Some(why) = self.link_out(&inside) {
            return Err(refuse(why));
        }
        Ok(path)
    }

    /// Check that `path` (a file found by listing a folder under the root, or a candidate folder)
    /// does not lead outside the root through a symbolic link; `field` says what it is.
    ///
    /// # Errors
    /// [`Error::OutsideInput`] as for [`ConfinedRoot::resolve`].
    pub fn check_inside(&self, path: &Path, referrer: &Path, field: &str) -> Result<()> {
        let shown = path.to_string_lossy();
        let inside: Vec<String> = match path.strip_prefix(&self.root) {
            Ok(rel) => rel
                .components()
                .filter_map(|c| match c {
                    Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
                    _ => None,
                })
                .collect(),
            Err(_) => {
                return self
                    .resolve(referrer, field, &self.root, &shown)
                    .map(|_| ());
            }
        };
        match self.link_out(&inside) {
            Some(why) => Err(self.refusal(referrer, field, &shown, why)),
            None => Ok(()),
        }
    }

    /// `written` (an absolute path) relative to the user's folder this root is a copy of
    /// ([`register_original`]), when it lies inside that folder; `None` otherwise.
    fn in_original(&self, written: &str) -> Option<String> {
        let originals = ORIGINALS
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let written = Path::new(written);
        originals.iter().find_map(|(copy, spellings)| {
            let below = self.root.strip_prefix(copy).ok()?;
            spellings.iter().find_map(|original| {
                let rel = written.strip_prefix(original.join(below)).ok()?;
                // `..` is kept: the relative name is checked for climbing out like any other.
                let parts: Option<Vec<&str>> = rel
                    .components()
                    .filter(|c| !matches!(c, Component::CurDir))
                    .map(|c| match c {
                        Component::Normal(n) => n.to_str(),
                        Component::ParentDir => Some(".."),
                        _ => None,
                    })
                    .collect();
                parts.filter(|p| !p.is_empty()).map(|p| p.join("/"))
            })
        })
    }

    /// Whether `path` lies lexically inside the root (no file system access).
    #[must_use]
    pub fn contains(&self, path: &Path) -> bool {
        path.strip_prefix(&self.root).is_ok_and(|rel| {
            !rel.components()
                .any(|c| matches!(c, Component::ParentDir | Component::RootDir))
        })
    }

    /// The components of `base` below the root (`base` is a folder the caller built from the
    /// root; spelled otherwise, it is compared after resolving links). `None` when `base` is not
    /// inside the root at all, so that nothing is resolved from outside (fail closed).
    fn relative_part(&self, base: &Path) -> Option<Vec<String>> {
        let rel = match base.strip_prefix(&self.root) {
            Ok(rel) => rel.to_path_buf(),
            Err(_) => std::fs::canonicalize(base)
                .ok()?
                .strip_prefix(&self.real)
                .ok()?
                .to_path_buf(),
        };
        let mut out: Vec<String> = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => out.push(n.to_string_lossy().into_owned()),
                Component::ParentDir => {
                    out.pop()?;
                }
                _ => {}
            }
        }
        Some(out)
    }

    /// The first step of `root/inside…` (a folder on the way, or the file) that is a symbolic link
    /// leading outside the root; `None` when every existing step stays inside.
    fn link_out(&self, inside: &[String]) -> Option<Escape> {
        let mut step = self.root.clone();
        for part in inside {
            step.push(part);
            let Ok(meta) = std::fs::symlink_metadata(&step) else {
                // Missing from here on: nothing further can lead anywhere.
                return None;
            };
            if !meta.file_type().is_symlink() {
                continue;
            }
            match std::fs::canonicalize(&step) {
                Ok(target) if target.starts_with(&self.real) => {}
                Ok(target) => {
                    return Some(Escape::SymlinkOut { link: step, target });
                }
                // A dangling link: the reader reports the file as missing; where it would lead
                // cannot be read, so it is refused as leading out.
                Err(_) => {
                    let target = std::fs::read_link(&step).unwrap_or_default();
                    return Some(Escape::SymlinkOut { link: step, target });
                }
            }
        }
        None
    }

    fn refusal(&self, referrer: &Path, field: &str, written: &str, why: Escape) -> Error {
        Error::OutsideInput {
            path: referrer.to_path_buf(),
            field: field.to_string(),
            found: written.to_string(),
            why: Box::new(why),
            root: self.root.clone(),
        }
    }
}

/// Work-folder copies and the user's folders they were staged from (each as given, made
/// absolute, and with its links resolved).
type Originals = Vec<(PathBuf, Vec<PathBuf>)>;
static ORIGINALS: std::sync::RwLock<Originals> = std::sync::RwLock::new(Vec::new());

/// Record that the folder `copy` (a job's staged input) is a copy of the user's local folder
/// `original`: an absolute path that an input file writes into `original` then resolves to the
/// same file of `copy` ([`ConfinedRoot::resolve`]). Only the copy is ever read, so this lets no
/// name reach outside what the job was given.
pub fn register_original(copy: &Path, original: &Path) {
    let mut spellings = vec![original.to_path_buf()];
    spellings.extend(std::path::absolute(original).ok());
    spellings.extend(std::fs::canonicalize(original).ok());
    spellings.dedup();
    let mut all = ORIGINALS
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    all.retain(|(c, _)| c != copy);
    all.push((copy.to_path_buf(), spellings));
}

/// `/x`, `\x`, `C:\x`, `C:/x` or `C:x`: a name that does not start from the folder it is read in.
fn is_absolute_name(written: &str) -> bool {
    let b = written.as_bytes();
    written.starts_with(['/', '\\'])
        || Path::new(written).is_absolute()
        || (b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':')
}

/// Fixtures shared by the containment tests of every reader: one folder layout with links in and
/// out, a seeded generator of written names, and a model of the rule to compare with.
#[cfg(test)]
pub(crate) mod testing {
    use std::path::{Path, PathBuf};

    /// A temporary folder holding `root/` and, beside it, `secret.png` (another team's file).
    /// Under `root`: `in/a.png`; links `up` and `in/up` to the folder above the root (out),
    /// `side` and `in/side` to `root/in` (inside), `leak.png` to the secret (out).
    pub fn layout() -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        std::fs::create_dir_all(root.join("in")).unwrap();
        std::fs::write(root.join("in/a.png"), b"x").unwrap();
        std::fs::write(t.path().join("secret.png"), b"s").unwrap();
        for at in ["up", "in/up"] {
            std::os::unix::fs::symlink(t.path(), root.join(at)).unwrap();
        }
        for at in ["side", "in/side"] {
            std::os::unix::fs::symlink(root.join("in"), root.join(at)).unwrap();
        }
        std::os::unix::fs::symlink(t.path().join("secret.png"), root.join("leak.png")).unwrap();
        (t, root)
    }

    /// A tiny deterministic generator (SplitMix64), so the property tests need no new crate and
    /// every failure reproduces from its seed.
    pub struct Seeded(pub u64);

    impl Seeded {
        pub fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        pub fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
            from[(self.next() % from.len() as u64) as usize]
        }

        /// A written name: segments that stay, climb (`..`), loop (`.`, empty), pass through
        /// links in (`side`) or out (`up`, `leak.png`), `/` or `\` between them, and sometimes
        /// an absolute or drive-letter start.
        pub fn path(&mut self) -> String {
            let n = 1 + self.next() % 5;
            let mut parts: Vec<&str> = (0..n)
                .map(|_| self.pick(&["in", "..", ".", "side", "up", "a.png", "x", "leak.png", ""]))
                .collect();
            parts.push(self.pick(&["a.png", "secret.png", "b.png", "leak.png"]));
            let start = self.pick(&["", "", "", "/", "./", "../", "C:/", "\\"]);
            let sep = self.pick(&["/", "/", "\\"]);
            format!("{start}{}", parts.join(sep))
        }

        /// [`Seeded::path`] without drive letters, `\` or empty segments (names in URIs).
        pub fn uri_path(&mut self) -> String {
            loop {
                let p = self.path();
                if !p.contains([':', '\\']) && !p.contains("//") {
                    return p;
                }
            }
        }

        /// `s` with some `.` and `/` percent-encoded (`%2e`, `%2E`, `%2f`).
        pub fn percent_encode_some(&mut self, s: &str) -> String {
            s.chars()
                .map(|c| match (c, self.next() % 3) {
                    ('.', 0) => "%2e".to_string(),
                    ('.', 1) => "%2E".to_string(),
                    ('/', 0) => "%2f".to_string(),
                    _ => c.to_string(),
                })
                .collect()
        }
    }

    /// The model of the rule, computed differently: `..` counted from the folder `base` (below
    /// the root is out), then the deepest existing ancestor of the final path canonicalised; a
    /// name is inside iff that lies under the root.
    pub fn model_is_inside(root: &Path, base: &[&str], written: &str) -> bool {
        if written.starts_with(['/', '\\']) || written.get(1..2) == Some(":") {
            return false;
        }
        let mut here: Vec<&str> = base.to_vec();
        for part in written.split(['/', '\\']) {
            match part {
                "" | "." => {}
                ".." => {
                    if here.pop().is_none() {
                        return false;
                    }
                }
                p => here.push(p),
            }
        }
        let real_root = std::fs::canonicalize(root).unwrap();
        let full: PathBuf = here.iter().fold(root.to_path_buf(), |p, s| p.join(s));
        let deepest = full.ancestors().find_map(|a| std::fs::canonicalize(a).ok());
        deepest.is_some_and(|real| real.starts_with(&real_root))
    }

    /// Whether `e` is the containment refusal naming `field`.
    pub fn is_refusal(e: &crate::Error, field: &str) -> bool {
        matches!(e, crate::Error::OutsideInput { field: f, .. } if f == field)
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{Seeded, layout, model_is_inside};
    use super::*;

    fn why(e: Error) -> Escape {
        match e {
            Error::OutsideInput { why, .. } => *why,
            other => panic!("expected OutsideInput, got {other}"),
        }
    }

    #[test]
    fn names_inside_resolve_with_dots_removed() {
        let (_t, root) = layout();
        let r = ConfinedRoot::new(&root).unwrap();
        let base = root.join("in");
        let j = Path::new("t.json");
        for w in [
            "a.png",
            "./a.png",
            "../in/a.png",
            "x/../a.png",
            "side/a.png",
            "missing.png",
        ] {
            let p = r.resolve(j, "f", &base, w).unwrap();
            assert!(p.starts_with(&root), "{w}: {}", p.display());
        }
        assert_eq!(
            r.resolve(j, "f", &base, "./a.png").unwrap(),
            root.join("in/a.png")
        );
    }

    #[test]
    fn absolute_climbing_and_linked_names_are_refused_naming_the_field() {
        let (_t, root) = layout();
        let r = ConfinedRoot::new(&root).unwrap();
        let base = root.join("in");
        let j = Path::new("t.json");
        assert_eq!(
            why(r.resolve(j, "f", &base, "/etc/passwd").unwrap_err()),
            Escape::Absolute
        );
        assert_eq!(
            why(r.resolve(j, "f", &base, "C:\\x.png").unwrap_err()),
            Escape::Absolute
        );
        assert_eq!(
            why(r.resolve(j, "f", &base, "../../secret.png").unwrap_err()),
            Escape::ClimbsOut
        );
        assert_eq!(
            why(r.resolve(j, "f", &base, "..\\..\\secret.png").unwrap_err()),
            Escape::ClimbsOut
        );
        assert!(matches!(
            why(r.resolve(j, "f", &base, "up/secret.png").unwrap_err()),
            Escape::SymlinkOut { .. }
        ));
        assert!(matches!(
            why(r.resolve(j, "f", &base, "../leak.png").unwrap_err()),
            Escape::SymlinkOut { .. }
        ));
        let msg = r
            .resolve(j, "frames[3].file_path", &base, "/etc/passwd")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("frames[3].file_path") && msg.contains("/etc/passwd"),
            "{msg}"
        );
        assert!(msg.contains("t.json") && msg.contains("inside"), "{msg}");
    }

    /// Issue 44 (trial F10): an absolute path into the user's own folder resolves to the same
    /// file of the job's copy; an absolute path anywhere else (beside it, climbing out of it,
    /// into another job's original) stays refused.
    #[test]
    fn absolute_paths_into_the_users_own_folder_resolve_to_the_copy() {
        let t = tempfile::tempdir().unwrap();
        let original = t.path().join("team/capture");
        let copy = t.path().join("work/job/input");
        let other_copy = t.path().join("work/other/input");
        for dir in [
            &original,
            &copy,
            &other_copy,
            &t.path().join("team/elsewhere"),
        ] {
            std::fs::create_dir_all(dir.join("images")).unwrap();
        }
        register_original(&copy, &original);
        register_original(&other_copy, &t.path().join("team/elsewhere"));
        let r = ConfinedRoot::new(&copy).unwrap();
        let j = Path::new("transforms.json");
        let o = original.display().to_string();
        assert_eq!(
            r.resolve(j, "file_path", &copy, &format!("{o}/images/a.png"))
                .unwrap(),
            copy.join("images/a.png")
        );
        assert_eq!(
            r.resolve(
                j,
                "file_path",
                &copy,
                &format!("{o}/images/../images/a.png")
            )
            .unwrap(),
            copy.join("images/a.png")
        );
        assert_eq!(
            r.resolve(
                j,
                "file_path",
                &copy.join("images"),
                &format!("{o}/./b.png")
            )
            .unwrap(),
            copy.join("b.png")
        );
        for outside in [
            format!("{o}/../elsewhere/images/a.png"),
            format!("{o}-2/images/a.png"),
            format!("{}/images/a.png", t.path().join("team/elsewhere").display()),
            o.clone(),
            "/etc/passwd".into(),
        ] {
            assert_eq!(
                why(r.resolve(j, "file_path", &copy, &outside).unwrap_err()),
                Escape::Absolute,
                "{outside}"
            );
        }
    }

    /// A base folder outside the root resolves nothing (fail closed); one spelled through a link
    /// into the root resolves from where it really is.
    #[test]
    fn a_base_outside_the_root_resolves_nothing() {
        let (t, root) = layout();
        let r = ConfinedRoot::new(&root.join("in")).unwrap();
        let j = Path::new("t.json");
        assert_eq!(
            why(r.resolve(j, "f", t.path(), "secret.png").unwrap_err()),
            Escape::ClimbsOut
        );
        assert_eq!(
            r.resolve(j, "f", &root.join("side"), "a.png").unwrap(),
            root.join("in/a.png")
        );
    }

    #[test]
    fn listed_files_are_checked_for_links_out() {
        let (_t, root) = layout();
        let r = ConfinedRoot::new(&root).unwrap();
        let j = Path::new("t.json");
        r.check_inside(&root.join("in/a.png"), j, "images/")
            .unwrap();
        r.check_inside(&root.join("in/side/a.png"), j, "images/")
            .unwrap();
        assert!(
            r.check_inside(&root.join("leak.png"), j, "images/")
                .is_err()
        );
        assert!(
            r.check_inside(&root.join("in/up/secret.png"), j, "images/")
                .is_err()
        );
    }

    /// Property: over generated names, `resolve` accepts exactly what the model accepts, and an
    /// accepted name's file (when it exists) canonicalises inside the root.
    #[test]
    fn resolve_agrees_with_the_model_over_generated_names() {
        let (_t, root) = layout();
        let r = ConfinedRoot::new(&root).unwrap();
        let real_root = std::fs::canonicalize(&root).unwrap();
        let mut g = Seeded(41);
        for case in 0..4000 {
            let written = g.path();
            let got = r.resolve(Path::new("t.json"), "f", &root.join("in"), &written);
            let want = model_is_inside(&root, &["in"], &written);
            assert_eq!(got.is_ok(), want, "case {case}: `{written}` → {got:?}");
            if let Ok(p) = got
                && let Ok(real) = std::fs::canonicalize(&p)
            {
                assert!(
                    real.starts_with(&real_root),
                    "case {case}: `{written}` → {}",
                    real.display()
                );
            }
        }
    }
}
