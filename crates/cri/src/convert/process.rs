//! The container's process: its arguments, environment and working directory from the ContainerConfig over
//! the image config (kubelet's and Docker's rules), its user resolved in the image's passwd and group
//! files, its capabilities and its OOM score.

use std::collections::BTreeMap;

use crius_api::cri;
use oci_spec::runtime::{LinuxCapabilitiesBuilder, Process, ProcessBuilder, User, UserBuilder};
use serde_json::Value;

use super::{CALL, Host, built, caps};
use crate::error::{Error, Result};

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// The process's arguments, as kubelet and Docker define them: `command` replaces the image's Entrypoint,
/// `args` its Cmd (and a `command` alone drops the Cmd).
pub fn args(config: &cri::ContainerConfig, image: &Value) -> Result<Vec<String>> {
    let (entry, cmd) = (
        strings(&image["config"]["Entrypoint"]),
        strings(&image["config"]["Cmd"]),
    );
    let mut out = if config.command.is_empty() {
        entry
    } else {
        config.command.clone()
    };
    if !config.args.is_empty() {
        out.extend(config.args.iter().cloned());
    } else if config.command.is_empty() {
        out.extend(cmd);
    }
    if out.is_empty() {
        return Err(Error::invalid(
            CALL,
            "args",
            "are empty: no command in the container config, and no Entrypoint or Cmd in the image",
        ));
    }
    Ok(out)
}

/// The image's env with the config's on top (a key set twice keeps the last value, in first position).
pub fn env(config: &cri::ContainerConfig, image: &Value) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    let mut vals: BTreeMap<String, String> = BTreeMap::new();
    let pairs = strings(&image["config"]["Env"])
        .into_iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (kv, String::new()),
        });
    for (k, v) in pairs.chain(
        config
            .envs
            .iter()
            .map(|e| (e.key.clone(), String::from_utf8_lossy(&e.value).into_owned())),
    ) {
        if !vals.contains_key(&k) {
            keys.push(k.clone());
        }
        vals.insert(k, v);
    }
    keys.into_iter().map(|k| format!("{k}={}", vals[&k])).collect()
}

/// The entry of `name` in a passwd or group file's text (its fields).
fn lookup<'a>(file: &'a str, name: &str) -> Option<Vec<&'a str>> {
    file.lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.first() == Some(&name))
}

/// The gids of the groups the image's /etc/group (`group`) lists `name` as a member of, in file order.
fn member_of(group: &str, name: &str) -> Vec<u32> {
    group
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .filter(|f| f.get(3).is_some_and(|m| m.split(',').any(|m| m.trim() == name)))
        .filter_map(|f| f.get(2).and_then(|g| g.parse().ok()))
        .collect()
}

/// The process user: the security context's run_as_user/run_as_username/run_as_group, else the image's User
/// (`uid`, `name`, `uid:gid`, `name:group`), names looked up in the image's /etc/passwd and /etc/group
/// (`host.passwd`, `host.group`). Its additional gids, as containerd gives them: the primary gid, then (with
/// `supplemental_groups_policy` Merge, the default) every group the image's /etc/group lists the user in, as
/// a login would get, then the security context's `supplemental_groups`; with Strict, the image's groups are
/// left out. Each gid once.
pub fn user(config: &cri::ContainerConfig, image: &Value, host: &Host) -> Result<User> {
    let sc = config.linux.as_ref().and_then(|l| l.security_context.as_ref());
    let image_user = image["config"]["User"].as_str().unwrap_or_default();
    let (mut who, mut group) = match image_user.split_once(':') {
        Some((u, g)) => (u.to_string(), Some(g.to_string())),
        None => (image_user.to_string(), None),
    };
    if let Some(sc) = sc {
        if sc.run_as_group.is_some() && sc.run_as_user.is_none() && sc.run_as_username.is_empty() {
            return Err(Error::invalid(
                CALL,
                "run_as_group",
                "needs run_as_user or run_as_username",
            ));
        }
        if let Some(u) = &sc.run_as_user {
            who = u.value.to_string();
        } else if !sc.run_as_username.is_empty() {
            who = sc.run_as_username.clone();
        }
        if let Some(g) = &sc.run_as_group {
            group = Some(g.value.to_string());
        }
    }
    // The uid, the primary gid and the name /etc/group lists members by (None: the uid has no passwd entry).
    let numeric = if who.is_empty() {
        Some(0)
    } else {
        who.parse::<u32>().ok()
    };
    let (uid, mut gid, name) = match numeric {
        Some(uid) => {
            // A numeric uid (none: root): its primary group and name from passwd if it has an entry there.
            let entry = host
                .passwd
                .lines()
                .map(|l| l.split(':').collect::<Vec<_>>())
                .find(|f| f.get(2).and_then(|u| u.parse::<u32>().ok()) == Some(uid));
            let gid = entry
                .as_ref()
                .and_then(|f| f.get(3).and_then(|g| g.parse().ok()))
                .unwrap_or(0);
            (uid, gid, entry.and_then(|f| f.first().map(|n| n.to_string())))
        }
        None => {
            let f = lookup(&host.passwd, &who).ok_or_else(|| {
                Error::invalid(CALL, format!("user {who:?}"), "is not in the image's /etc/passwd")
            })?;
            let num = |i: usize| f.get(i).and_then(|x| x.parse::<u32>().ok()).unwrap_or(0);
            (num(2), num(3), Some(who.clone()))
        }
    };
    if let Some(g) = group.filter(|g| !g.is_empty()) {
        gid = match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => lookup(&host.group, &g)
                .and_then(|f| f.get(2).and_then(|x| x.parse().ok()))
                .ok_or_else(|| {
                    Error::invalid(CALL, format!("group {g:?}"), "is not in the image's /etc/group")
                })?,
        };
    }
    let extra = sc.map(|s| s.supplemental_groups.as_slice()).unwrap_or_default();
    let extra = extra
        .iter()
        .map(|&g| {
            u32::try_from(g).map_err(|_| {
                Error::invalid(
                    CALL,
                    "supplemental_groups",
                    format!("holds {g}, which is not a gid"),
                )
            })
        })
        .collect::<Result<Vec<u32>>>()?;
    let strict =
        sc.is_some_and(|s| s.supplemental_groups_policy == cri::SupplementalGroupsPolicy::Strict as i32);
    let from_image = match &name {
        Some(n) if !strict => member_of(&host.group, n),
        _ => Vec::new(),
    };
    let mut gids: Vec<u32> = Vec::new();
    for g in std::iter::once(gid).chain(from_image).chain(extra) {
        if !gids.contains(&g) {
            gids.push(g);
        }
    }
    built(
        UserBuilder::default()
            .uid(uid)
            .gid(gid)
            .additional_gids(gids)
            .build(),
    )
}

/// The container's process.
pub(super) fn process(
    c: &cri::ContainerConfig,
    sc: Option<&cri::LinuxContainerSecurityContext>,
    image: &Value,
    host: &Host,
) -> Result<Process> {
    let caps = caps::set(&caps::capabilities(sc, &host.bounding)?)?;
    let image_dir = image["config"]["WorkingDir"].as_str().unwrap_or_default();
    let cwd = [c.working_dir.as_str(), image_dir]
        .into_iter()
        .find(|d| !d.is_empty())
        .unwrap_or("/");
    let (args, env) = (args(c, image)?, env(c, image));
    // The request's own strings were validated; the image's may still hold a NUL, which the runtime could
    // only fail on at create, as an internal error.
    let from_image = args.iter().map(|a| ("args", a.as_str()));
    let from_image = from_image.chain(env.iter().map(|e| ("env", e.as_str())));
    if let Some((field, v)) = from_image.chain([("cwd", cwd)]).find(|(_, v)| v.contains('\0')) {
        return Err(Error::invalid(
            CALL,
            field,
            format!("{v:?} (from the image config) has a NUL byte"),
        ));
    }
    let mut capabilities = built(
        LinuxCapabilitiesBuilder::default()
            .bounding(caps.clone())
            .effective(caps.clone())
            .permitted(caps)
            .build(),
    )?;
    // Their Default (which the builder starts from) holds runc's example sets: the spec has none of these.
    capabilities.set_inheritable(None);
    capabilities.set_ambient(None);
    let mut process = built(
        ProcessBuilder::default()
            .terminal(c.tty)
            .user(user(c, image, host)?)
            .args(args)
            .env(env)
            .cwd(cwd)
            .capabilities(capabilities)
            .no_new_privileges(sc.is_some_and(|s| s.no_new_privs))
            .build(),
    )?;
    // Likewise runc's example's open-files limit.
    process.set_rlimits(None);
    let adj = c
        .linux
        .as_ref()
        .and_then(|l| l.resources.as_ref())
        .map(|r| r.oom_score_adj);
    if let Some(adj) = adj.filter(|a| *a != 0) {
        let adj = i32::try_from(adj)
            .map_err(|_| Error::invalid(CALL, "oom_score_adj", format!("{adj} is out of range")))?;
        process.set_oom_score_adj(Some(adj));
    }
    Ok(process)
}
