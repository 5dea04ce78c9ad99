//! Compiles the probe's BPF program (src/probe/probe.bpf.c) with clang into OUT_DIR, where
//! `probe` embeds it. Without clang, or when it fails, the build goes on: the object is left
//! empty and sluice says so in one log line at start when `[probe] enabled` (docs/probe.md).
//! `SLUICE_BPF_CLANG` names another clang; `SLUICE_PROBE_REQUIRED=1` makes a failure an error.

use std::path::PathBuf;
use std::process::Command;

const SOURCE: &str = "src/probe/probe.bpf.c";

fn main() {
    println!("cargo:rerun-if-changed={SOURCE}");
    println!("cargo:rerun-if-env-changed=SLUICE_BPF_CLANG");
    println!("cargo:rerun-if-env-changed=SLUICE_PROBE_REQUIRED");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("probe.bpf.o");
    let status = compile(&out);
    if let Err(why) = &status {
        if std::env::var("SLUICE_PROBE_REQUIRED").is_ok_and(|v| v == "1") {
            panic!("the probe's BPF program did not build: {why}");
        }
        println!("cargo:warning=sluice builds without its probe's BPF program: {why}");
        let _ = std::fs::write(&out, b"");
    }
    let said = match status {
        Ok(()) => "built".to_string(),
        Err(why) => why.replace(['\n', '\r'], " "),
    };
    println!("cargo:rustc-env=SLUICE_PROBE_BUILD={said}");
}

fn compile(out: &std::path::Path) -> Result<(), String> {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os != "linux" {
        return Err(format!("eBPF probes are Linux-only (target os {os})"));
    }
    let clang = std::env::var("SLUICE_BPF_CLANG").unwrap_or_else(|_| "clang".into());
    // Debian keeps <asm/types.h> (which <linux/types.h> includes) under the target's triplet.
    // …and bpf_tracing.h reads the registers as the target's pt_regs lays them out.
    let (triplet, arch) = match std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default().as_str() {
        "x86_64" => ("x86_64-linux-gnu", "x86"),
        "aarch64" => ("aarch64-linux-gnu", "arm64"),
        other => return Err(format!("no BPF build set up for {other}")),
    };
    let result = Command::new(&clang)
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
        .arg(format!("-I/usr/include/{triplet}"))
        .arg(format!("-D__TARGET_ARCH_{arch}"))
        .args(["-c", SOURCE, "-o"])
        .arg(out)
        .output();
    match result {
        Err(e) => Err(format!("{clang} could not be run ({e}); install clang and libbpf-dev (scripts/install-deps)")),
        Ok(o) if !o.status.success() => {
            let err = String::from_utf8_lossy(&o.stderr);
            let first = err.lines().find(|l| l.contains("error")).unwrap_or("failed").trim();
            Err(format!("{clang} failed: {first} (libbpf-dev installed?)"))
        }
        Ok(_) => Ok(()),
    }
}
