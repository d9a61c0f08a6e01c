//! Records the commit the `tandem` binary is built from (benchmark rows name it).
fn main() {
    let rev = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let dirty =
        std::process::Command::new("git").args(["status", "--porcelain", "--untracked-files=no"]).output().ok().is_some_and(|o| !o.stdout.is_empty());
    if let Some(r) = rev {
        println!("cargo:rustc-env=TANDEM_COMMIT={r}{}", if dirty { "+dirty" } else { "" });
    }
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/index");
    // An edit makes the tree dirty without touching the index: the sources count too.
    for dir in ["src", "reference/src", "optimized/src", "engine/src", "server/src", "conformance/src", "vendor"] {
        println!("cargo:rerun-if-changed={dir}");
    }
}
