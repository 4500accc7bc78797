//! The `[nri]` table: whether criusd hosts NRI (Node Resource Interface) plugins, where their socket is,
//! where pre-launched plugins and their configs are, and how long a plugin may take to register and to
//! answer one event (`crius_cri::nri`). Off by default, as in containerd 1.7.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The `[nri]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NriSection {
    /// Host NRI plugins at all.
    pub enable: bool,
    /// The socket plugins connect to.
    pub socket_path: PathBuf,
    /// Where pre-launched plugins are (`IDX-NAME` executables, started by criusd).
    pub plugin_path: PathBuf,
    /// Where their configs are (`IDX-NAME.conf`, or `NAME.conf`).
    pub plugin_config_path: PathBuf,
    /// How long a plugin may take to register, a duration such as `"5s"` or `"500ms"`.
    pub plugin_registration_timeout: String,
    /// How long a plugin may take to answer one event; a plugin slower than this is dropped.
    pub plugin_request_timeout: String,
}

impl Default for NriSection {
    fn default() -> NriSection {
        NriSection {
            enable: false,
            socket_path: "/var/run/nri/nri.sock".into(),
            plugin_path: "/opt/nri/plugins".into(),
            plugin_config_path: "/etc/nri/conf.d".into(),
            plugin_registration_timeout: "5s".into(),
            plugin_request_timeout: "2s".into(),
        }
    }
}

/// `"2s"`, `"500ms"`, `"1m"` (a whole number and a unit, as containerd writes these timeouts).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(digits);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?}: not a duration (a number and ms, s or m)"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!("{s:?}: not a duration (a number and ms, s or m)")),
    }
}

impl NriSection {
    /// The registration and request timeouts, checked: each a duration above zero.
    pub fn timeouts(&self) -> Result<(Duration, Duration), String> {
        let one = |key: &str, v: &str| match parse_duration(v) {
            Ok(d) if !d.is_zero() => Ok(d),
            Ok(_) => Err(format!("[nri] {key} {v:?}: must be above zero")),
            Err(e) => Err(format!("[nri] {key} {e}")),
        };
        Ok((
            one("plugin_registration_timeout", &self.plugin_registration_timeout)?,
            one("plugin_request_timeout", &self.plugin_request_timeout)?,
        ))
    }

    /// Checks the paths (absolute) and the timeouts.
    pub fn check(&self) -> Result<(), String> {
        for (p, key) in [
            (&self.socket_path, "socket_path"),
            (&self.plugin_path, "plugin_path"),
            (&self.plugin_config_path, "plugin_config_path"),
        ] {
            if !p.is_absolute() {
                return Err(format!("[nri] {key} {}: must be an absolute path", p.display()));
            }
        }
        self.timeouts().map(drop)
    }

    /// The table as a commented TOML section, each path rendered by `value`.
    pub fn render(&self, value: impl Fn(&Path) -> String) -> String {
        let text = |s: &str| format!("{s:?}");
        format!(
            "[nri]\n\
             # Host NRI (Node Resource Interface) plugins: they see pods' and containers' lifecycle events\n\
             # and may adjust a container's spec at CreateContainer and update containers' resources.\n\
             # (--nri, --nri-socket-path, --nri-plugin-path, --nri-plugin-config-path,\n\
             # --nri-plugin-registration-timeout, --nri-plugin-request-timeout)\n\
             # default: false\nenable = {}\n\n\
             # The socket plugins connect to.\n# default: \"/var/run/nri/nri.sock\"\nsocket_path = {}\n\n\
             # Pre-launched plugins, executables named IDX-NAME (IDX two digits, the order they are called\n\
             # in), started by criusd at start-up.\n# default: \"/opt/nri/plugins\"\nplugin_path = {}\n\n\
             # The pre-launched plugins' configs, IDX-NAME.conf or NAME.conf.\n\
             # default: \"/etc/nri/conf.d\"\nplugin_config_path = {}\n\n\
             # How long a plugin may take to register (\"500ms\", \"5s\", \"1m\").\n\
             # default: \"5s\"\nplugin_registration_timeout = {}\n\n\
             # How long a plugin may take to answer one event; a slower plugin is dropped with a\n\
             # warning and the CRI call goes on without it.\n\
             # default: \"2s\"\nplugin_request_timeout = {}\n\n",
            self.enable,
            value(&self.socket_path),
            value(&self.plugin_path),
            value(&self.plugin_config_path),
            text(&self.plugin_registration_timeout),
            text(&self.plugin_request_timeout),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::parse_duration;

    #[test]
    fn the_table_is_off_by_default_rendered_checked_and_read_back() {
        let mut c = crate::config::Config::default();
        assert!(!c.nri.enable);
        assert_eq!(c.nri.socket_path, std::path::Path::new("/var/run/nri/nri.sock"));
        assert_eq!(
            c.nri.timeouts().unwrap(),
            (Duration::from_secs(5), Duration::from_secs(2))
        );
        c.nri.enable = true;
        c.nri.plugin_path = "/usr/lib/nri".into();
        c.nri.plugin_request_timeout = "750ms".into();
        let text = c.render();
        assert!(text.contains("[nri]\n# Host NRI"), "{text}");
        assert!(text.contains("enable = true\n"), "{text}");
        assert!(text.contains("plugin_path = \"/usr/lib/nri\"\n"), "{text}");
        assert!(text.contains("plugin_request_timeout = \"750ms\"\n"), "{text}");
        assert_eq!(toml::from_str::<crate::config::Config>(&text).unwrap(), c);
        assert!(c.check().is_ok());
        assert_eq!(c.nri.timeouts().unwrap().1, Duration::from_millis(750));
    }

    #[test]
    fn bad_paths_and_timeouts_are_named() {
        let mut c = crate::config::Config::default();
        c.nri.socket_path = "nri.sock".into();
        assert!(c.check().unwrap_err().contains("[nri] socket_path nri.sock"));
        c.nri.socket_path = "/run/nri.sock".into();
        c.nri.plugin_request_timeout = "0s".into();
        assert!(c.check().unwrap_err().contains("plugin_request_timeout \"0s\""));
        c.nri.plugin_request_timeout = "2 seconds".into();
        assert!(c.check().unwrap_err().contains("plugin_request_timeout"));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("2h").is_err());
    }
}
