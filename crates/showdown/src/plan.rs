//! What a showdown is asked to do ([`Plan`]), what every round of a row runs with
//! ([`RoundPlan`]), and what one round gives back ([`RoundRun`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use wirespeed_lab::topo::RxModel;

use crate::results::RoundFigures;

/// The lab the HTTP and echo rows build (ws-sd-*).
pub(crate) const LAB: &str = "sd";
/// The server's CPU in every one-shard row, and on a server host (`--role server`).
pub(crate) const SERVER_CPU: usize = 1;
pub(crate) const CLIENT_CPU: usize = 0;
pub(crate) const PORT: u16 = 8080;
/// nginx's prefix, config, pid and temp files (not the results directory).
pub(crate) const NGINX_DIR: &str = "/run/wirespeed/showdown-nginx";

/// Where the showdown runs, or that it only renders.
#[derive(Clone, Debug)]
pub enum Mode {
    /// Every row in this machine's lab.
    Lab,
    /// Measure nothing: rewrite the table, Markdown and charts from an earlier showdown.json.
    Render(PathBuf),
    /// The host under test of two: start each row's server and probe it, as the client asks
    /// over the control connection on `listen`. `allow_host` lets the tuned rows change the
    /// real interface's settings (restored after each row).
    Server {
        listen: SocketAddr,
        allow_host: bool,
    },
    /// The load host of two: drive the rows against the server host at `peer` and write the
    /// results.
    Client { peer: SocketAddr },
}

/// A whole showdown: where, which rows, how many rounds, and where the results go.
#[derive(Clone, Debug)]
pub struct Plan {
    pub mode: Mode,
    /// Where results go.
    pub out: PathBuf,
    pub rounds: usize,
    /// Only these rows (1-based; row 1 and each chosen row's base row are added); all if None.
    pub rows: Option<Vec<usize>>,
    pub round: RoundPlan,
}

/// What every round of every row runs with.
#[derive(Clone, Copy, Debug)]
pub struct RoundPlan {
    /// HTTP connections of the load generator per server shard (the echo rows use their own).
    pub connections: usize,
    pub rx_model: RxModel,
    pub napi_defer_hard_irqs: u32,
    pub gro_flush_timeout_ns: u64,
    /// The echo rows' link MTU (`--mtu`).
    pub echo_mtu: u32,
    pub warmup: Duration,
    pub duration: Duration,
    /// Load the BPF probes (syscall and locality figures).
    pub bpf: bool,
}

/// One round of one row: its figures, the server's command line, and every setting its lab
/// applied.
pub(crate) struct RoundRun {
    pub(crate) figures: RoundFigures,
    pub(crate) server: String,
    pub(crate) settings: Vec<String>,
    /// The MTU of the server's link, where it was read.
    pub(crate) mtu: Option<u32>,
}

/// `--mtu`: the echo rows' link MTU, 1280..=9000, or a one-line refusal.
pub fn parse_echo_mtu(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(m) if (1280..=9000).contains(&m) => Ok(m),
        _ => Err(format!(
            "`{s}` is not an MTU this showdown runs: give 1280..=9000"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_echo_mtu_is_a_jumbo_or_ordinary_mtu_or_a_one_line_refusal() {
        assert_eq!(parse_echo_mtu("9000"), Ok(9000));
        assert_eq!(parse_echo_mtu("1280"), Ok(1280));
        for bad in ["1279", "9001", "jumbo", ""] {
            let err = parse_echo_mtu(bad).unwrap_err();
            assert!(err.contains("1280..=9000") && !err.contains('\n'), "{err}");
        }
    }
}
