//! Help and version texts laid out as runc's (a tool that reads them finds its lines where runc has them):
//! `NAME:` then `   crius-runc VERB - what it does`, `USAGE:`, the options; `-v` prints the version, then
//! `commit:`, `spec:` and `libseccomp:` lines; help asked of an unknown command says there is no such topic.

use clap::{CommandFactory, FromArgMatches};

use crate::cli::Cli;

/// The runtime-spec version crius-runc implements (the highest `ociVersion` it runs; `features` reports it).
pub const SPEC_VERSION: &str = "1.2.0";

const ROOT_TEMPLATE: &str = "NAME:\n   {name} - {about}\n\nUSAGE:\n   {usage}\n\n\
COMMANDS:\n{subcommands}\n\nGLOBAL OPTIONS:\n{options}\n";

/// The parser, with runc's help layout on the root and on every command.
pub fn command() -> clap::Command {
    Cli::command().help_template(ROOT_TEMPLATE).mut_subcommands(|c| {
        let name = c.get_name().to_string();
        c.help_template(format!(
            "NAME:\n   crius-runc {name} - {{about}}\n\nUSAGE:\n   {{usage}}\n\nOPTIONS:\n{{options}}\n"
        ))
    })
}

/// What to do with the command line: run the command, or exit with a code once help, the version or a
/// parse error has been printed.
pub enum Parsed {
    /// A command to run.
    Run(Box<Cli>),
    /// Already answered: exit with this code.
    Exit(u8),
}

/// Parses the process's arguments.
pub fn parse() -> Parsed {
    let args: Vec<String> = std::env::args().collect();
    let asks_help = args.iter().skip(1).any(|a| a == "-h" || a == "--help");
    let matches = match command().try_get_matches_from(&args) {
        Ok(m) => m,
        Err(e) if asks_help && e.kind() == clap::error::ErrorKind::InvalidSubcommand => {
            let topic = e
                .get(clap::error::ContextKind::InvalidSubcommand)
                .map(|v| v.to_string())
                .unwrap_or_default();
            eprintln!("No help topic for '{topic}'");
            return Parsed::Exit(3);
        }
        Err(e) => {
            let _ = e.print();
            return Parsed::Exit(if e.use_stderr() { 1 } else { 0 });
        }
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return Parsed::Exit(1);
        }
    };
    if cli.version {
        print!("{}", version());
        return Parsed::Exit(0);
    }
    if cli.command.is_none() {
        let _ = command().print_help();
        return Parsed::Exit(0);
    }
    Parsed::Run(Box::new(cli))
}

/// The `-v` text: the version, then the commit (`CRIUS_COMMIT` at build time, else `unknown`), the runtime-spec
/// version and libseccomp's.
pub fn version() -> String {
    let commit = option_env!("CRIUS_COMMIT").unwrap_or("unknown");
    let seccomp = crius_oci::seccomp::library_version().unwrap_or_else(|| "unknown".into());
    format!(
        "crius-runc version {}\ncommit: {commit}\nspec: {SPEC_VERSION}\nlibseccomp: {seccomp}\n",
        env!("CARGO_PKG_VERSION")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_has_runcs_layout_on_the_root_and_every_command() {
        let root = command().render_help().to_string();
        let lines: Vec<&str> = root.lines().collect();
        assert_eq!(lines[0], "NAME:");
        assert_eq!(lines[1], "   crius-runc - Open Container Initiative runtime");
        let mut cmd = command();
        cmd.build();
        for sub in cmd.get_subcommands_mut() {
            let name = sub.get_name().to_string();
            if name == "help" {
                continue;
            }
            let text = sub.render_help().to_string();
            let second = text.lines().nth(1).unwrap_or_default().to_string();
            assert!(
                second.starts_with(&format!("   crius-runc {name} - ")),
                "{name}: {text}"
            );
        }
    }

    #[test]
    fn version_has_commit_and_spec_lines() {
        let v = version();
        let lines: Vec<&str> = v.lines().collect();
        assert!(
            lines[0].starts_with("crius-runc version ") && lines[0].contains('.'),
            "{v}"
        );
        assert!(lines[1].starts_with("commit: "), "{v}");
        assert_eq!(lines[2], format!("spec: {SPEC_VERSION}"));
        assert!(lines[3].starts_with("libseccomp: "), "{v}");
    }
}
