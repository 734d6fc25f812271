"""The command groups of `eyas` (`eyas.cli` assembles them into one typer app): each module
holds its commands, each command parsing its config (`eyas.cli_schema`) and calling its stage."""
