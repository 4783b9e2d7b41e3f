//! The architecture table, aliases, bad names, and host detection's brand-string parsing.

use aneforge::arch::{host, AneArch, ArchError, Family, ARCHS};

#[test]
fn the_table_has_28_architectures_in_five_groups() {
    assert_eq!(ARCHS.len(), 28);
    let below: Vec<&str> = ARCHS
        .iter()
        .filter(|a| a.family.is_none())
        .map(|a| a.name)
        .collect();
    assert_eq!(below, ["h11", "h12", "m9", "t0"]);
    let of = |f: Family| -> Vec<&str> {
        ARCHS
            .iter()
            .filter(|a| a.family == Some(f) && !a.name.starts_with('u'))
            .map(|a| a.name)
            .collect()
    };
    assert_eq!(of(Family::A13), ["h13", "h13g", "t1"]);
    assert_eq!(of(Family::A14), ["h14", "h14g", "h14c"]);
    assert_eq!(of(Family::A15), ["h15", "h15g", "h15c", "m11"]);
    assert_eq!(
        of(Family::A16),
        ["h16", "h16g", "h16c", "h16s", "h17", "h17a", "h17g", "h17s", "h17c", "h17d", "h18"]
    );
    let reference: Vec<&str> = ARCHS
        .iter()
        .filter(|a| a.name.starts_with('u'))
        .map(|a| a.name)
        .collect();
    assert_eq!(reference, ["u1", "u2", "u3"]);
    assert_eq!(AneArch::all().count(), 24);
}

#[test]
fn suffixes_decode_core_counts() {
    for a in ARCHS
        .iter()
        .filter(|a| a.name.starts_with('h') && a.family.is_some())
    {
        let expected = match a.name.chars().last() {
            Some('g') => 8,
            Some('s') => 16,
            Some('c') => 32,
            Some('d') => 64,
            _ => 4,
        };
        assert_eq!(a.cores, Some(expected), "{}", a.name);
    }
}

#[test]
fn names_and_aliases_parse_case_insensitively() {
    for (name, arch, family) in [
        ("h16", "h16", Family::A16),
        ("H15G", "h15g", Family::A15),
        (" h17d ", "h17d", Family::A16),
        ("m1", "h13", Family::A13),
        ("M2", "h14", Family::A14),
        ("m3", "h15", Family::A15),
        ("m4", "h16", Family::A16),
        ("m5", "h17", Family::A16),
        ("a13", "h13", Family::A13),
        ("a15", "h15", Family::A15),
        ("a18", "h18", Family::A16),
        ("u2", "u2", Family::A13),
        ("m11", "m11", Family::A15),
        ("t1", "t1", Family::A13),
    ] {
        let a = AneArch::new(name).unwrap();
        assert_eq!((a.name(), a.family()), (arch, family), "{name}");
        assert_eq!(name.parse::<AneArch>().unwrap(), a);
    }
}

#[test]
fn every_capable_architecture_round_trips_through_its_name() {
    for a in AneArch::all() {
        assert_eq!(AneArch::new(a.name()).unwrap(), a);
        assert_eq!(a.to_string(), a.name());
    }
}

#[test]
fn unknown_names_are_errors_listing_valid_ones() {
    for bad in ["h19", "m6", "x", "", "h16x", "a12", "gpu"] {
        let err = AneArch::new(bad).unwrap_err();
        assert!(matches!(err, ArchError::UnknownArch { .. }), "{bad}: {err}");
        let msg = err.to_string();
        assert!(msg.contains(&format!("{bad:?}")), "{msg}");
        for valid in ["h13", "h16", "h17d", "u3", "m1", "a18"] {
            assert!(msg.contains(valid), "{msg} lacks {valid}");
        }
        assert!(!msg.contains("h11"), "{msg}");
    }
}

#[test]
fn below_mil_architectures_are_rejected_with_a_reason() {
    for old in ["h11", "h12", "m9", "t0", "H12"] {
        let err = AneArch::new(old).unwrap_err();
        assert!(matches!(err, ArchError::BelowMilFloor { .. }), "{old}");
        assert!(err.to_string().contains("MIL floor"), "{err}");
    }
}

#[test]
fn brand_strings_map_to_architectures() {
    for (brand, arch) in [
        ("Apple M1", Some("h13")),
        ("Apple M1 Pro", Some("h13")),
        ("Apple M1 Max", Some("h13")),
        ("Apple M2 Ultra", Some("h14")),
        ("Apple M3", Some("h15")),
        ("Apple M4 Max", Some("h16")),
        ("Apple M5", Some("h17")),
        ("  Apple M2\n", Some("h14")),
        ("Apple M6", None),
        ("Apple M12", None),
        ("Apple M", None),
        ("Apple M1X", None),
        ("Intel(R) Core(TM) i9-9980HK CPU @ 2.40GHz", None),
        ("", None),
    ] {
        assert_eq!(
            host::arch_from_brand(brand).map(|a| a.name()),
            arch,
            "{brand:?}"
        );
    }
}

#[test]
fn detection_prefers_the_override_and_falls_back_with_a_warning() {
    let d = host::resolve(Some("h15g"), Some("Apple M1")).unwrap();
    assert_eq!(d.arch.name(), "h15g");
    assert!(d.warning.is_none());
    assert!(d.source.contains("ANEFORGE_TARGET"));

    let d = host::resolve(None, Some("Apple M4 Pro")).unwrap();
    assert_eq!(d.arch.name(), "h16");
    assert!(d.warning.is_none());

    let d = host::resolve(Some(""), Some("Apple M2")).unwrap();
    assert_eq!(d.arch.name(), "h14");

    for brand in [None, Some("Apple M9"), Some("Intel Xeon")] {
        let d = host::resolve(None, brand).unwrap();
        assert_eq!(d.arch.family(), Family::A13);
        let w = d.warning.expect("a fallback warns");
        assert!(w.contains("ANEFORGE_TARGET"), "{w}");
    }

    let err = host::resolve(Some("h99"), Some("Apple M1")).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("ANEFORGE_TARGET") && msg.contains("h99"),
        "{msg}"
    );
}
