//! `wirespeed`: the one binary. Each subcommand lives in its own module under `cmd/`.

#![deny(unsafe_code)]

use clap::{CommandFactory, Parser, Subcommand};

mod cmd;

#[derive(Parser)]
#[command(
    name = "wirespeed",
    version,
    about = "Linux networking at kernel-bypass speed, measured"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a server (http, echo) on the kernel stack or the bypass stack.
    Serve(cmd::serve::Args),
    /// Load generators: HTTP/1.1 and echo, closed or open loop, HDR latency.
    Bench(cmd::bench::Args),
    /// Lab topologies in network namespaces (pair, line, lb) and tuning profiles.
    Lab(cmd::lab::Args),
    /// Attach probes to a running server: CPU per request, syscalls, context switches, locality.
    Probe(cmd::probe::Args),
    /// Reproduce the seed experiments on this machine and print the table.
    Showdown(cmd::showdown::Args),
    /// The transparent fast path: Linux configuration in, specialized XDP/TC program out.
    Fp(cmd::fp::Args),
    /// L4 load balancer in XDP, configured like ipvsadm: `lb run`, `lb -A/-a/-L ...`, `lb doctor`.
    Lb(cmd::lb::Args),
    /// Write the man pages (wirespeed.1, one per subcommand) into DIR; the Debian package's.
    #[command(hide = true)]
    Man {
        /// Directory to write the pages into (created if missing).
        dir: std::path::PathBuf,
    },
    /// Print the shell completion script for SHELL to stdout.
    #[command(hide = true)]
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(a) => cmd::serve::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Lab(a) => cmd::lab::run(a),
        Command::Probe(a) => cmd::probe::run(a),
        Command::Showdown(a) => cmd::showdown::run(a),
        Command::Fp(a) => cmd::fp::run(a),
        Command::Lb(a) => cmd::lb::run(a),
        Command::Man { dir } => cmd::docs::man_pages(Cli::command(), &dir),
        Command::Completions { shell } => {
            cmd::docs::completions(Cli::command(), shell);
            Ok(())
        }
    };
    if let Err(e) = result {
        eprintln!("wirespeed: {}", one_line(&e));
        std::process::exit(1);
    }
}

/// One line, the whole cause chain: "what failed: why". A cause that an error's own message
/// already ends with (a library error that prints its source and also names it as its
/// source) is said once, not twice.
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::one_line;

    /// Prints its source and names it as its source, as `#[error("{what}: {source}")]` does.
    #[derive(Debug)]
    struct Io {
        what: &'static str,
        source: std::io::Error,
    }

    impl std::fmt::Display for Io {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{}: {}", self.what, self.source)
        }
    }

    impl std::error::Error for Io {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn a_cause_the_message_already_gives_is_said_once() {
        let io = std::io::Error::from_raw_os_error(libc::ESRCH);
        let e = anyhow::Error::new(Io {
            what: "sched_getaffinity(9)",
            source: io,
        })
        .context("probe pid 9");
        assert_eq!(
            one_line(&e),
            format!(
                "probe pid 9: sched_getaffinity(9): {}",
                std::io::Error::from_raw_os_error(libc::ESRCH)
            )
        );
        let plain = anyhow::anyhow!("no route").context("connect 198.18.0.1");
        assert_eq!(one_line(&plain), "connect 198.18.0.1: no route");
    }
}
