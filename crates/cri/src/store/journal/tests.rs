use super::*;

fn open(p: &Path) -> (Journal, HashMap<String, Vec<u8>>) {
    Journal::open(p).unwrap()
}

#[test]
fn puts_and_deletes_survive_a_reopen_the_last_winning() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("journal");
    let (j, v) = open(&p);
    assert!(v.is_empty());
    j.put("a", b"one").unwrap();
    j.put("b", b"two").unwrap();
    j.put("a", b"three").unwrap();
    j.delete("b").unwrap();
    j.delete("never").unwrap();
    j.put("c", b"").unwrap();
    drop(j);
    let (_, v) = open(&p);
    assert_eq!(
        v,
        HashMap::from([("a".into(), b"three".to_vec()), ("c".into(), vec![])])
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
}

#[test]
fn a_file_cut_anywhere_opens_as_the_entries_before_the_cut_and_takes_new_ones() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("journal");
    let (j, _) = open(&p);
    let ends: Vec<u64> = (0..4)
        .map(|i| {
            j.put(&format!("k{i}"), format!("value {i}").as_bytes()).unwrap();
            j.len()
        })
        .collect();
    drop(j);
    let whole = std::fs::read(&p).unwrap();
    for cut in MAGIC.len()..=whole.len() {
        std::fs::write(&p, &whole[..cut]).unwrap();
        let (j, v) = open(&p);
        let kept = ends.iter().filter(|&&e| e <= cut as u64).count();
        assert_eq!(v.len(), kept, "cut at {cut}");
        assert_eq!(
            std::fs::metadata(&p).unwrap().len(),
            if kept == 0 {
                MAGIC.len() as u64
            } else {
                ends[kept - 1]
            }
        );
        j.put("new", b"after the cut").unwrap();
        drop(j);
        let (_, v) = open(&p);
        assert_eq!(v["new"], b"after the cut", "cut at {cut}");
        assert_eq!(v.len(), kept + 1);
    }
    // A corrupt byte in the last entry is cut off the same way.
    let mut bad = whole.clone();
    *bad.last_mut().unwrap() ^= 0xff;
    std::fs::write(&p, &bad).unwrap();
    assert_eq!(open(&p).1.len(), 3);
}

#[test]
fn a_file_that_is_not_a_journal_is_refused_and_left_alone() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("journal");
    std::fs::write(&p, b"{\"id\": 1}").unwrap();
    let err = Journal::open(&p).err().unwrap();
    assert_eq!(err.kind(), ErrorKind::InvalidData);
    assert!(err.to_string().contains("not a crius journal"), "{err}");
    assert_eq!(std::fs::read(&p).unwrap(), b"{\"id\": 1}");
}

#[test]
fn bad_keys_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let (j, _) = open(&d.path().join("journal"));
    assert_eq!(j.put("", b"x").unwrap_err().kind(), ErrorKind::InvalidInput);
    assert_eq!(
        j.put(&"k".repeat(256), b"x").unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
}

#[test]
fn rewrites_keep_the_file_near_its_live_size_and_lose_nothing() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("journal");
    let (j, _) = open(&p);
    let value = vec![7u8; 1000];
    for round in 0..2000 {
        j.put(&format!("k{}", round % 10), &value).unwrap();
        if round % 3 == 0 {
            j.put(&format!("gone{round}"), b"x").unwrap();
            j.delete(&format!("gone{round}")).unwrap();
        }
    }
    let size = std::fs::metadata(&p).unwrap().len();
    assert!(size <= COMPACT_FLOOR + 2000, "{size} bytes for 10 live keys");
    assert!(!p.with_extension("tmp").exists());
    j.put("k3", b"last").unwrap();
    drop(j);
    let (_, v) = open(&p);
    assert_eq!(v.len(), 10);
    assert_eq!(v["k3"], b"last");
    assert_eq!(v["k4"], value);
}

#[test]
fn concurrent_writers_all_land() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("journal");
    let j = Arc::new(open(&p).0);
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let j = j.clone();
            std::thread::spawn(move || {
                for i in 0..200 {
                    j.put(&format!("t{t}"), format!("{i}").as_bytes()).unwrap();
                    j.put(&format!("t{t}-{i}"), &[0u8; 300]).unwrap();
                    if i % 2 == 0 {
                        j.delete(&format!("t{t}-{i}")).unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    drop(j);
    let (_, v) = open(&p);
    assert_eq!(v.len(), 8 + 8 * 100);
    assert!((0..8).all(|t| v[&format!("t{t}")] == b"199"));
}

#[test]
fn a_journal_cut_short_while_first_made_and_a_rewrite_cut_short_are_repaired() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("journal");
    for made in [&b""[..], &MAGIC[..5]] {
        std::fs::write(&p, made).unwrap();
        assert!(keys(&p).unwrap().is_empty());
        let (j, v) = open(&p);
        assert!(v.is_empty());
        j.put("a", b"1").unwrap();
        drop(j);
        assert_eq!(open(&p).1["a"], b"1");
    }
    std::fs::write(p.with_extension("tmp"), b"half a rewrite").unwrap();
    let (_, v) = open(&p);
    assert_eq!(v["a"], b"1", "the journal is the old one, whole");
    assert!(!p.with_extension("tmp").exists());
}
