//! The hidden `wirespeed man DIR` and `wirespeed completions SHELL`: the man pages and the
//! shell completions, generated from the same clap definitions that parse the command line, so
//! that they cannot drift from it. `make deb` puts both into the package.

use std::path::Path;

use anyhow::Context;

/// Writes `wirespeed.1` and one page per visible subcommand (`wirespeed-fp.1`,
/// `wirespeed-fp-run.1`, ...) into `dir`.
pub fn man_pages(cmd: clap::Command, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    clap_mangen::generate_to(cmd, dir)
        .with_context(|| format!("write the man pages into {}", dir.display()))
}

/// Prints the completion script for `shell` to stdout.
pub fn completions(mut cmd: clap::Command, shell: clap_complete::Shell) {
    let name = cmd.get_name().to_string();
    clap_complete::generate(shell, &mut cmd, name, &mut std::io::stdout());
}
