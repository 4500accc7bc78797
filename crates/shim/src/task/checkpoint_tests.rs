//! Checkpoint and restore against the stand-in runtime of `tests.rs` (its `checkpoint` writes an
//! `inventory.img` and kills the init unless `--leave-running`; its `restore` starts a new one).

use super::tests::Fixture;
use super::*;

fn image(f: &Fixture, name: &str) -> PathBuf {
    f.root.path().join(format!("image-{name}"))
}

fn running(f: &Fixture, id: &str) -> u32 {
    let pid = f.create(id).unwrap();
    assert!(matches!(f.event(), Event::Create { .. }));
    f.tasks.start(id, "").unwrap();
    assert!(matches!(f.event(), Event::Start { .. }));
    pid
}

#[test]
fn a_checkpoint_leaves_the_container_running_unless_asked_to_exit() {
    let f = Fixture::new();
    let pid = running(&f, "c1");
    let img = image(&f, "1");
    let req = CheckpointTask {
        image_path: img.clone(),
        ..Default::default()
    };
    f.tasks.checkpoint("c1", &req).unwrap();
    assert!(img.join("inventory.img").is_file());
    assert_eq!(
        f.event(),
        Event::Checkpointed {
            container_id: "c1".into()
        }
    );
    assert_eq!(f.state("c1", ""), State::Running);
    f.no_event();

    let exiting = CheckpointTask {
        image_path: image(&f, "2"),
        exit: true,
        ..Default::default()
    };
    f.tasks.checkpoint("c1", &exiting).unwrap();
    let exit = f.wait("c1", "").unwrap();
    assert_eq!(exit.status, 137);
    let mut saw_exit = false;
    for _ in 0..2 {
        match f.event() {
            Event::Exit { pid: p, .. } => {
                assert_eq!(p, pid);
                saw_exit = true;
            }
            Event::Checkpointed { .. } => {}
            e => panic!("unexpected {e:?}"),
        }
    }
    assert!(saw_exit);
    assert_eq!(f.state("c1", ""), State::Exited);
    // An exited container has nothing to dump.
    let e = f.tasks.checkpoint("c1", &req).unwrap_err();
    assert!(
        e.to_string().contains("checkpoint needs a running container"),
        "{e}"
    );
}

#[test]
fn a_failed_checkpoint_names_criu_s_errors_and_the_container_runs_on() {
    let f = Fixture::new();
    running(&f, "c1");
    f.mark("fail-checkpoint", true);
    let req = CheckpointTask {
        image_path: image(&f, "1"),
        ..Default::default()
    };
    let e = f.tasks.checkpoint("c1", &req).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("criu failed"), "{msg}");
    assert!(
        msg.contains("dump.log") && msg.contains("cannot dump c1"),
        "{msg}"
    );
    assert_eq!(f.state("c1", ""), State::Running);
    f.no_event();
}

#[test]
fn a_create_with_a_checkpoint_restores_at_start() {
    let f = Fixture::new();
    running(&f, "c1");
    let img = image(&f, "1");
    let req = CheckpointTask {
        image_path: img.clone(),
        exit: true,
        ..Default::default()
    };
    f.tasks.checkpoint("c1", &req).unwrap();
    f.wait("c1", "").unwrap();

    // Not a checkpoint: refused at Create.
    let mut bad = f.request("c2");
    bad.checkpoint = Some(f.root.path().join("nothing"));
    let e = f.tasks.create(bad).unwrap_err();
    assert!(e.to_string().contains("no inventory.img"), "{e}");

    let mut r = f.request("c2");
    r.checkpoint = Some(img);
    assert_eq!(f.tasks.create(r).unwrap(), 0, "nothing runs before Start");
    assert_eq!(f.state("c2", ""), State::Created);
    assert_eq!(f.calls("create"), 1);
    let pid = f.tasks.start("c2", "").unwrap();
    assert!(pid > 0);
    assert_eq!(f.calls("restore"), 1);
    assert_eq!(f.calls("start"), 1, "the restored container is not started again");
    assert_eq!(f.state("c2", ""), State::Running);
    // Its exit is watched as a created one's is.
    f.tasks.kill("c2", "", 9, false).unwrap();
    assert_eq!(f.wait("c2", "").unwrap().status, 137);
}
