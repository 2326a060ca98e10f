//! Not built yet: owned by the issue that adds this subcommand.

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("this subcommand is not built yet")
}
