//! The CRI request fields crius does not carry out, refused; and the stop signal, which it does.
//!
//! A field kubelet may send and crius would otherwise drop is refused here with InvalidArgument naming it,
//! before anything is made ([`container_config`], [`sandbox_config`], called from [`crate::validate`]). The
//! promise is kept by a test over every field of every CRI request message (`unsupported/fields.rs`): each is
//! carried out, refused here, or ignored for a reason written beside it. Refused:
//!
//! - a Capability's `add_ambient_capabilities`: the process's ambient set is left empty;
//! - a Mount's `image_sub_path` without an `image` (image volumes are mounted: `container::image_volumes`);
//! - a Mount's `uidMappings` without `gidMappings` or the other way round (with both, the mount is idmapped:
//!   `convert::mounts`, in a pod with a user namespace of its own);
//! - a Mount's `recursive_read_only` without `readonly` or with a propagation other than private, as the CRI
//!   defines it (with both, it is made: `convert::mounts` asks the runtime for `rro`);
//! - a `supplemental_groups_policy` that is neither Merge nor Strict, of a pod or a container (both are
//!   carried out by `convert::process::user`: Merge adds the image's `/etc/group` memberships, Strict does
//!   not; a pod's has nothing of its own to act on, crius runs no pause container);
//! - a user namespace (`userns_options`) of mode CONTAINER or TARGET, or of mode POD with mappings crius
//!   cannot make (not one of each, container id 0 not mapped): `crate::sandbox::userns` says what it takes;
//!   mode POD is carried out (`hostUsers: false`: the pod's own user namespace, idmapped mounts).
//!
//! `stop_signal` is carried out: [`stop_signal`] turns the CRI enum into the signal number StopContainer
//! sends first, and ContainerStatus reports the value the container was created with; a value the enum does
//! not define is refused.

use crius_api::cri;

use crate::error::{Error, Result};

#[cfg(test)]
mod fields;
#[cfg(test)]
mod proto_walk;

/// The first real-time signal as containerd, runc and glibc programs number it (glibc keeps 32 and 33).
const SIGRTMIN: u32 = 34;
/// The last real-time signal.
const SIGRTMAX: u32 = 64;

/// The signal number of a ContainerConfig's `stop_signal`: None for RUNTIME_DEFAULT (the image's
/// STOPSIGNAL, else SIGTERM, decides). A value this CRI does not define is refused, naming the field.
pub fn stop_signal(call: &'static str, value: i32) -> Result<Option<u32>> {
    use cri::Signal as S;
    let signal = cri::Signal::try_from(value).map_err(|_| {
        Error::invalid(
            call,
            "stop_signal",
            format!("{value} is not a signal of the CRI's Signal enum"),
        )
    })?;
    let n = match signal {
        S::RuntimeDefault => return Ok(None),
        S::Sigabrt | S::Sigiot => libc::SIGABRT,
        S::Sigalrm => libc::SIGALRM,
        S::Sigbus => libc::SIGBUS,
        S::Sigchld | S::Sigcld => libc::SIGCHLD,
        S::Sigcont => libc::SIGCONT,
        S::Sigfpe => libc::SIGFPE,
        S::Sighup => libc::SIGHUP,
        S::Sigill => libc::SIGILL,
        S::Sigint => libc::SIGINT,
        S::Sigio | S::Sigpoll => libc::SIGIO,
        S::Sigkill => libc::SIGKILL,
        S::Sigpipe => libc::SIGPIPE,
        S::Sigprof => libc::SIGPROF,
        S::Sigpwr => libc::SIGPWR,
        S::Sigquit => libc::SIGQUIT,
        S::Sigsegv => libc::SIGSEGV,
        S::Sigstkflt => libc::SIGSTKFLT,
        S::Sigstop => libc::SIGSTOP,
        S::Sigsys => libc::SIGSYS,
        S::Sigterm => libc::SIGTERM,
        S::Sigtrap => libc::SIGTRAP,
        S::Sigtstp => libc::SIGTSTP,
        S::Sigttin => libc::SIGTTIN,
        S::Sigttou => libc::SIGTTOU,
        S::Sigurg => libc::SIGURG,
        S::Sigusr1 => libc::SIGUSR1,
        S::Sigusr2 => libc::SIGUSR2,
        S::Sigvtalrm => libc::SIGVTALRM,
        S::Sigwinch => libc::SIGWINCH,
        S::Sigxcpu => libc::SIGXCPU,
        S::Sigxfsz => libc::SIGXFSZ,
        // The real-time ones are numbered in the enum from SIGRTMIN (35) up to SIGRTMAX (65): SIGRTMIN+n and
        // SIGRTMAX-n in between.
        rt => return Ok(Some(SIGRTMIN + (rt as u32 - S::Sigrtmin as u32))),
    };
    Ok(Some(n as u32))
}

const _: () = assert!(
    cri::Signal::Sigrtmax as u32 - cri::Signal::Sigrtmin as u32 == SIGRTMAX - SIGRTMIN,
    "the CRI's real-time signals span SIGRTMIN..=SIGRTMAX"
);

/// The refusals of a ContainerConfig's fields crius does not act on (see the module doc).
pub fn container_config(c: &cri::ContainerConfig) -> Result<()> {
    const CALL: &str = "CreateContainer";
    stop_signal(CALL, c.stop_signal)?;
    for (i, m) in c.mounts.iter().enumerate() {
        let field = |f: &str| format!("mounts[{i}].{f}");
        if !crate::container::image_volumes::is_image(m) && !m.image_sub_path.is_empty() {
            return Err(Error::invalid(
                CALL,
                field("image_sub_path"),
                "is set on a mount that is no image volume (image is empty)",
            ));
        }
        recursive_read_only(CALL, i, m)?;
        if m.uid_mappings.is_empty() != m.gid_mappings.is_empty() {
            let f = if m.uid_mappings.is_empty() {
                "gidMappings"
            } else {
                "uidMappings"
            };
            return Err(Error::invalid(
                CALL,
                field(f),
                "is set alone: an idmapped mount needs both uidMappings and gidMappings",
            ));
        }
    }
    if let Some(sc) = c.linux.as_ref().and_then(|l| l.security_context.as_ref()) {
        groups_policy(CALL, "linux.security_context", sc.supplemental_groups_policy)?;
        userns(CALL, "linux.security_context", sc.namespace_options.as_ref())?;
        if let Some(caps) = sc
            .capabilities
            .as_ref()
            .filter(|c| !c.add_ambient_capabilities.is_empty())
        {
            return Err(Error::invalid(
                CALL,
                "linux.security_context.capabilities.add_ambient_capabilities",
                format!(
                    "is {:?}: crius leaves the ambient set empty",
                    caps.add_ambient_capabilities
                ),
            ));
        }
    }
    Ok(())
}

/// The refusals of a PodSandboxConfig's fields crius does not act on (see the module doc).
pub fn sandbox_config(c: &cri::PodSandboxConfig) -> Result<()> {
    const CALL: &str = "RunPodSandbox";
    if let Some(sc) = c.linux.as_ref().and_then(|l| l.security_context.as_ref()) {
        groups_policy(CALL, "linux.security_context", sc.supplemental_groups_policy)?;
        userns(CALL, "linux.security_context", sc.namespace_options.as_ref())?;
    }
    Ok(())
}

/// A Mount's `recursive_read_only` (made with the runtime's `rro` option) as the CRI defines it: only with
/// `readonly`, and only with PROPAGATION_PRIVATE (a mount propagated from the host later would not be
/// read-only).
fn recursive_read_only(call: &'static str, i: usize, m: &cri::Mount) -> Result<()> {
    if !m.recursive_read_only {
        return Ok(());
    }
    let field = format!("mounts[{i}].recursive_read_only");
    if !m.readonly {
        return Err(Error::invalid(
            call,
            field,
            "is set without readonly, which it needs",
        ));
    }
    if m.propagation != cri::MountPropagation::PropagationPrivate as i32 {
        let p = cri::MountPropagation::try_from(m.propagation)
            .map_or_else(|_| m.propagation.to_string(), |p| p.as_str_name().into());
        return Err(Error::invalid(
            call,
            field,
            format!("is set with propagation {p}: it needs PROPAGATION_PRIVATE"),
        ));
    }
    Ok(())
}

fn groups_policy(call: &'static str, at: &str, policy: i32) -> Result<()> {
    if cri::SupplementalGroupsPolicy::try_from(policy).is_ok() {
        return Ok(());
    }
    Err(Error::invalid(
        call,
        format!("{at}.supplemental_groups_policy"),
        format!("is {policy}, not a SupplementalGroupsPolicy (Merge or Strict)"),
    ))
}

/// A user namespace's options, as [`crate::sandbox::userns`] takes them.
fn userns(call: &'static str, at: &str, ns: Option<&cri::NamespaceOption>) -> Result<()> {
    crate::sandbox::userns::wanted(call, at, ns).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_signals_are_the_kernel_s_numbers() {
        let n = |s: cri::Signal| stop_signal("T", s as i32).unwrap();
        assert_eq!(n(cri::Signal::RuntimeDefault), None);
        assert_eq!(n(cri::Signal::Sigusr1), Some(10));
        assert_eq!(n(cri::Signal::Sigterm), Some(15));
        assert_eq!(n(cri::Signal::Sigkill), Some(9));
        assert_eq!(n(cri::Signal::Sigquit), Some(3));
        assert_eq!(n(cri::Signal::Sigcld), Some(17));
        assert_eq!(n(cri::Signal::Sigpoll), Some(29));
        assert_eq!(n(cri::Signal::Sigrtmin), Some(34));
        assert_eq!(n(cri::Signal::Sigrtminplus1), Some(35));
        assert_eq!(n(cri::Signal::Sigrtminplus15), Some(49));
        assert_eq!(n(cri::Signal::Sigrtmaxminus14), Some(50));
        assert_eq!(n(cri::Signal::Sigrtmaxminus1), Some(63));
        assert_eq!(n(cri::Signal::Sigrtmax), Some(64));
        let e = stop_signal("CreateContainer", 66).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.to_string().contains("stop_signal"), "{e}");
    }

    #[test]
    fn every_named_signal_maps_to_one_nix_knows() {
        for v in 1..=cri::Signal::Sigxfsz as i32 {
            let n = stop_signal("T", v).unwrap().unwrap();
            assert!(nix::sys::signal::Signal::try_from(n as i32).is_ok(), "{v} → {n}");
        }
    }

    fn refused(c: &cri::ContainerConfig) -> String {
        let e = container_config(c).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        e.to_string()
    }

    #[test]
    fn fields_crius_does_not_act_on_are_refused_by_name() {
        assert!(container_config(&cri::ContainerConfig::default()).is_ok());
        let mount = |m: cri::Mount| cri::ContainerConfig {
            mounts: vec![cri::Mount::default(), m],
            ..Default::default()
        };
        let image = cri::ImageSpec {
            image: "busybox".into(),
            ..Default::default()
        };
        // Image volumes are mounted; a sub path without an image is refused.
        assert!(
            container_config(&mount(cri::Mount {
                image: Some(image),
                image_sub_path: "etc".into(),
                ..Default::default()
            }))
            .is_ok()
        );
        let msg = refused(&mount(cri::Mount {
            image_sub_path: "etc".into(),
            ..Default::default()
        }));
        assert!(msg.contains("mounts[1].image_sub_path"), "{msg}");
        let rro = cri::Mount {
            readonly: true,
            recursive_read_only: true,
            ..Default::default()
        };
        assert!(container_config(&mount(rro.clone())).is_ok());
        let msg = refused(&mount(cri::Mount {
            readonly: false,
            ..rro.clone()
        }));
        assert!(
            msg.contains("mounts[1].recursive_read_only is set without readonly"),
            "{msg}"
        );
        for p in [
            cri::MountPropagation::PropagationHostToContainer,
            cri::MountPropagation::PropagationBidirectional,
        ] {
            let msg = refused(&mount(cri::Mount {
                propagation: p as i32,
                ..rro.clone()
            }));
            assert!(
                msg.contains("mounts[1].recursive_read_only")
                    && msg.contains(p.as_str_name())
                    && msg.contains("needs PROPAGATION_PRIVATE"),
                "{msg}"
            );
        }
        let msg = refused(&mount(cri::Mount {
            gid_mappings: vec![cri::IdMapping::default()],
            ..Default::default()
        }));
        assert!(msg.contains("mounts[1].gidMappings"), "{msg}");

        let policy = |p: i32| cri::ContainerConfig {
            linux: Some(cri::LinuxContainerConfig {
                security_context: Some(cri::LinuxContainerSecurityContext {
                    supplemental_groups_policy: p,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(container_config(&policy(cri::SupplementalGroupsPolicy::Strict as i32)).is_ok());
        let msg = refused(&policy(7));
        assert!(
            msg.contains("linux.security_context.supplemental_groups_policy is 7"),
            "{msg}"
        );
    }

    #[test]
    fn a_pod_user_namespace_needs_its_mappings_and_the_node_s_is_fine() {
        let pod = |mode: cri::NamespaceMode| cri::PodSandboxConfig {
            linux: Some(cri::LinuxPodSandboxConfig {
                security_context: Some(cri::LinuxSandboxSecurityContext {
                    namespace_options: Some(cri::NamespaceOption {
                        userns_options: Some(cri::UserNamespace {
                            mode: mode as i32,
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(sandbox_config(&pod(cri::NamespaceMode::Node)).is_ok());
        let e = sandbox_config(&pod(cri::NamespaceMode::Pod)).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(
            e.to_string().contains(
                "RunPodSandbox: linux.security_context.namespace_options.userns_options.uids has 0 mappings"
            ),
            "{e}"
        );
        assert!(sandbox_config(&cri::PodSandboxConfig::default()).is_ok());
    }
}
