//! Logs go to stderr as text (people) or JSON (log pipelines); `RUST_LOG` wins over `--log-level`. Colours only
//! when stderr is a terminal: a container's log is a file, and `kubectl logs` would show the escapes.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use super::{LogFlags, LogFormat, RuntimeError};

/// Installs the global log subscriber as `flags` ask (`RUST_LOG` winning over `--log-level`); call once, first.
pub fn init(flags: &LogFlags) -> Result<(), RuntimeError> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.trim().is_empty() => EnvFilter::try_new(directives),
        _ => EnvFilter::try_new(&flags.log_level),
    }
    .map_err(|e| RuntimeError::Logging(format!("invalid log filter: {e}")))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let installed = match flags.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).try_init(),
    };
    installed.map_err(|e| RuntimeError::Logging(e.to_string()))
}
