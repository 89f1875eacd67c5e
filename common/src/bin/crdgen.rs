//! Writes the CRD YAML generated from the API types into a directory (default `crds/`).
//!
//! `crdgen --check` compares instead of writing and exits 1 when a file is stale, for CI.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

#[derive(Parser)]
#[command(about = "Generate the tkex.tencent.com CRD YAML from the Rust API types")]
struct Args {
    /// Directories to write (or check) the CRD files in: the install directory and the Helm chart's.
    #[arg(long, default_values = common::crd::OUTPUT_DIRS)]
    out: Vec<PathBuf>,
    /// Do not write; exit 1 if any file differs from what would be generated.
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut stale = Vec::new();
    for (file, crd) in common::crd::all() {
        let yaml = match common::crd::to_yaml(&crd) {
            Ok(yaml) => yaml,
            Err(err) => {
                eprintln!("error: cannot serialise {file}: {err}");
                return ExitCode::FAILURE;
            }
        };
        for dir in &args.out {
            let path = dir.join(file);
            if args.check {
                if std::fs::read_to_string(&path).ok().as_deref() != Some(yaml.as_str()) {
                    stale.push(path);
                }
            } else if let Err(err) = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, &yaml)) {
                eprintln!("error: cannot write {}: {err}", path.display());
                return ExitCode::FAILURE;
            } else {
                println!("wrote {}", path.display());
            }
        }
    }
    if stale.is_empty() {
        ExitCode::SUCCESS
    } else {
        for path in stale {
            eprintln!("stale: {} (run `cargo run -p common --bin crdgen`)", path.display());
        }
        ExitCode::FAILURE
    }
}
