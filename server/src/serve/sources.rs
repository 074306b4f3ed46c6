//! The resource gateway ([`portcullis_gateway`]) as `serve` configures it:
//! `--source` and `--sources FILE` (read here) and the bounds' flags
//! ([`GatewayArgs`]) into the library's [`Config`].

use std::time::Duration;

use portcullis_gateway::{Config, Gateway, SourceSpec};

use crate::cli::GatewayArgs;

/// The gateway's configuration: every source the flags name, in order
/// (the `--source` flags first, then the file's in name order; a name used
/// twice is refused when the gateway starts), `public_url` this server's
/// public origin.
fn config(args: &GatewayArgs, public_url: &str) -> Result<Config, String> {
    let mut sources: Vec<SourceSpec> = args
        .sources
        .iter()
        .map(|s| SourceSpec::parse(s))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    if let Some(path) = &args.sources_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        sources.extend(SourceSpec::parse_file(&text).map_err(|e| e.to_string())?);
    }
    Ok(Config {
        sources,
        connect_timeout: Duration::from_secs(args.source_connect_timeout_secs),
        call_timeout: Duration::from_secs(args.source_call_timeout_secs),
        max_response_bytes: usize::try_from(args.source_max_response_bytes).unwrap_or(usize::MAX),
        max_concurrent: usize::try_from(args.source_max_concurrent).unwrap_or(16),
        public_url: public_url.to_owned(),
    })
}

/// The gateway `args` configure, started (no sources: [`Gateway::none`]),
/// `reserved` the built-in tools' names.
pub(crate) async fn start(
    args: &GatewayArgs,
    public_url: &str,
    reserved: Vec<String>,
) -> Result<Gateway, String> {
    if args.sources.is_empty() && args.sources_file.is_none() {
        return Ok(Gateway::none());
    }
    let config = config(args, public_url)?;
    Gateway::start(&config, reserved)
        .await
        .map_err(|e| e.to_string())
}
