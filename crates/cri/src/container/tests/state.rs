//! What the records say after the fact: exits from events, listings without the shim, a dead shim,
//! recovery, live updates and stats.

use crius_api::cri;
use tonic::Code;

use super::{World, config, open};
use crate::container::Containers;
use crate::error::answer as code;
use crate::store::container::State;

#[test]
fn exits_come_from_events_once() {
    let w = World::new();
    let mut events = w.containers.subscribe();
    let id = w.create("job").unwrap();
    w.containers.start(&id).unwrap();
    let exit = w.shim.exit(&id, "", 0);
    w.containers.mark_exit(&id, exit.status as i32, exit.at_ns);
    w.containers.mark_exit(&id, 1, exit.at_ns + 5);
    let c = w.containers.get(&id).unwrap();
    assert_eq!(
        (c.record.state(), c.record.exit_code, c.record.finished_at),
        (State::Exited, 0, exit.at_ns)
    );
    let st = crate::container::status::status(&c);
    assert_eq!(st.reason, "Completed");
    let stopped = std::iter::from_fn(|| events.try_recv().ok())
        .filter(|c| c.kind == cri::ContainerEventType::ContainerStoppedEvent)
        .count();
    assert_eq!(stopped, 1);
    // Stop of an exited container does nothing; an OOM kill reads as such.
    let n = w.shim.calls().len();
    w.containers.stop(&id, 10).unwrap();
    assert_eq!(w.shim.calls().len(), n);
    w.containers.mark_oom(&id);
    assert_eq!(
        crate::container::status::status(&w.containers.get(&id).unwrap()).reason,
        "OOMKilled"
    );
}

#[test]
fn listing_a_thousand_containers_asks_no_shim() {
    let w = World::new();
    let mut ids = Vec::new();
    for i in 0..1000 {
        ids.push(w.create(&format!("c{i}")).unwrap());
    }
    for id in ids.iter().step_by(2) {
        w.containers.start(id).unwrap();
    }
    let before = w.shim.calls().len();
    let all = crate::container::list(&w.containers, None);
    assert_eq!(all.len(), 1000);
    // The image id as ContainerStatus and ImageStatus give it (critest's image identifier consistency).
    let st = crate::container::status::status(&w.containers.get(&all[0].id).unwrap());
    assert!(!all[0].image_id.is_empty());
    assert_eq!(
        (all[0].image_id.as_str(), all[0].image_ref.as_str()),
        (st.image_id.as_str(), st.image_ref.as_str())
    );
    let running = cri::ContainerFilter {
        state: Some(cri::ContainerStateValue {
            state: cri::ContainerState::ContainerRunning as i32,
        }),
        ..Default::default()
    };
    assert_eq!(crate::container::list(&w.containers, Some(&running)).len(), 500);
    let labelled = cri::ContainerFilter {
        label_selector: [("app".to_string(), "c7".to_string())].into(),
        ..Default::default()
    };
    assert_eq!(crate::container::list(&w.containers, Some(&labelled)).len(), 1);
    for id in &ids[..10] {
        crate::container::status::status(&w.containers.get(id).unwrap());
    }
    assert_eq!(w.shim.calls().len(), before, "no shim call for listing or status");
}

#[test]
fn a_dead_shim_makes_its_containers_unknown_until_an_exit_is_known() {
    let w = World::new();
    let a = w.create("a").unwrap();
    let b = w.create("b").unwrap();
    w.containers.start(&a).unwrap();
    w.containers.start(&b).unwrap();
    w.containers.mark_exit(&b, 2, 0);
    w.containers.shim_gone("sb1");
    assert_eq!(w.state(&a), State::Unknown);
    assert_eq!(w.state(&b), State::Exited, "a known exit stays");
    // Stop of an unknown container is done; a late exit event still lands.
    w.containers.stop(&a, 1).unwrap();
    w.containers.mark_exit(&a, 137, 0);
    assert_eq!(w.state(&a), State::Exited);
}

#[test]
fn recovery_reads_each_unfinished_container_once() {
    let w = World::new();
    let running = w.create("running").unwrap();
    let exited = w.create("exited").unwrap();
    let created = w.create("created").unwrap();
    w.containers.start(&running).unwrap();
    w.containers.start(&exited).unwrap();
    // While criusd is down, one exits.
    w.shim.exit(&exited, "", 9);
    let before = w.shim.calls().len();
    let again = open(&w.dir, w.shim.clone(), w.images.clone());
    again.recover();
    let states = |c: &Containers| [&running, &exited, &created].map(|id| c.get(id).unwrap().record.state());
    assert_eq!(states(&again), [State::Running, State::Exited, State::Created]);
    assert_eq!(again.get(&exited).unwrap().record.exit_code, 9);
    assert_eq!(w.shim.calls().len() - before, 3, "one state call each");
    // Names come back with the records, and with the requests that took them: the same request again is a
    // retry (the container made), another one is refused naming the holder.
    let same = again.create(&w.sandbox, w.dir.path(), config("running", 0, "busybox"));
    assert_eq!(same.unwrap(), running);
    let mut other = config("running", 0, "busybox");
    other.labels.insert("v".into(), "2".into());
    let (c, msg) = code(again.create(&w.sandbox, w.dir.path(), other).unwrap_err());
    assert_eq!(c, Code::AlreadyExists);
    assert!(msg.contains(&running), "{msg}");
    // With the shim gone, unfinished containers are UNKNOWN.
    *w.shim.gone.lock().unwrap() = true;
    let third = open(&w.dir, w.shim.clone(), w.images.clone());
    third.recover();
    assert_eq!(states(&third), [State::Unknown, State::Exited, State::Unknown]);
}

#[test]
fn updates_merge_apply_live_and_are_reported() {
    let w = World::new();
    let mut c = config("web", 0, "busybox");
    c.linux = Some(cri::LinuxContainerConfig {
        resources: Some(cri::LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: 50_000,
            memory_limit_in_bytes: 64 << 20,
            ..Default::default()
        }),
        ..Default::default()
    });
    let id = w.create_with(c).unwrap();
    w.containers.start(&id).unwrap();
    let new = cri::LinuxContainerResources {
        cpu_quota: 150_000,
        ..Default::default()
    };
    w.containers.update(&id, &new).unwrap();
    let sent = w
        .shim
        .calls()
        .into_iter()
        .find(|c| c.starts_with("update"))
        .unwrap();
    assert!(
        sent.contains("\"quota\":150000") && sent.contains("\"period\":100000"),
        "{sent}"
    );
    assert!(sent.contains("\"limit\":67108864"), "{sent}");
    let st = crate::container::status::status(&w.containers.get(&id).unwrap());
    let r = st.resources.unwrap().linux.unwrap();
    assert_eq!(
        (r.cpu_quota, r.cpu_period, r.memory_limit_in_bytes),
        (150_000, 100_000, 64 << 20)
    );
    w.containers.reopen_log(&id).unwrap();
    assert!(w.shim.calls().contains(&format!("reopen-log {id}")));
}

#[test]
fn stats_come_from_the_shim_for_running_containers() {
    let w = World::new();
    let a = w.create("a").unwrap();
    let b = w.create("b").unwrap();
    w.containers.start(&a).unwrap();
    let all = crate::container::list_stats(&w.containers, None);
    assert_eq!(all.len(), 1);
    let s = &all[0];
    assert_eq!(s.attributes.as_ref().unwrap().id, a);
    assert_eq!(
        s.memory.as_ref().unwrap().usage_bytes.as_ref().unwrap().value,
        1 << 20
    );
    assert_eq!(
        s.cpu
            .as_ref()
            .unwrap()
            .usage_core_nano_seconds
            .as_ref()
            .unwrap()
            .value,
        5_000_000
    );
    // Pressure where the shim has it (the fake's cpu and memory), none where it has not (its io).
    let some = |p: &Option<cri::PsiStats>| p.as_ref().and_then(|p| p.some.as_ref()).map(|d| d.total);
    assert_eq!(some(&s.cpu.as_ref().unwrap().psi), Some(1000));
    assert_eq!(some(&s.memory.as_ref().unwrap().psi), Some(1000));
    assert!(s.io.is_none());
    let idle = w.containers.stats(&w.containers.get(&b).unwrap());
    assert!(idle.cpu.is_none() && idle.writable_layer.is_some());
}
