//! The preflight report: every rejected, rewritten and oversized node, naming the node, op,
//! shape and limit, collected without stopping at the first problem.

use aneforge::arch::{AneArch, FindingKind};
use aneforge::graph::{constant, input, DType, HostArray};
use aneforge::pipeline::preflight;

#[test]
fn every_problem_of_a_graph_is_listed() {
    let table = constant(HostArray::full(&[50257, 64], 0.1).unwrap());
    let ids = input("ids", &[1, 8], DType::I32).unwrap();
    let emb = table.gather(&ids, 0).unwrap();
    let a = input("a", &[4, 20000], DType::F32).unwrap();
    let b = input("b", &[20000, 64], DType::F32).unwrap();
    let wide = a.matmul(&b).unwrap();
    let s = input("s", &[4, 64], DType::F32).unwrap().sin().unwrap();
    let c = s.cumsum(1, false, false).unwrap();
    let report = preflight(
        &[("emb", &emb), ("wide", &wide), ("c", &c)],
        AneArch::new("m2").unwrap(),
    )
    .unwrap();
    assert!(!report.is_legal());
    let text = report.to_string();
    println!("{text}");
    assert!(text.starts_with("preflight for h14 (A14/M2)"), "{text}");
    let find = |label: &str, op: &str, needle: &str| {
        report
            .findings
            .iter()
            .find(|f| f.kind.label() == label && f.op == op && f.to_string().contains(needle))
    };
    let g = find("rejected", "gather", "50257").expect("gather rejected");
    assert_eq!(g.shape, [1, 8, 64]);
    assert!(g.node.contains("output 'emb'"));
    let m = find("oversized", "matmul", "contraction 20000 > 16384").expect("contraction");
    assert!(m.node.contains("output 'wide'"));
    assert!(
        find("oversized", "input", "axis 1 is 20000 > 16384").is_some(),
        "{text}"
    );
    assert!(
        find("rewritten", "sin", "native from A15").is_some(),
        "{text}"
    );
    assert!(
        find("rewritten", "cumsum", "triangular").is_some(),
        "{text}"
    );
    assert!(
        find("note", "input", "i32 port carried as fp16").is_some(),
        "{text}"
    );
    assert_eq!(report.count("rejected"), 1, "{text}");
}

#[test]
fn a_legal_graph_reports_only_rewrites_and_notes() {
    let x = input("x", &[2, 32], DType::F32).unwrap();
    let w = constant(HostArray::full(&[16, 32], 0.01).unwrap());
    let y = x.linear(&w, None).unwrap().square().unwrap();
    for arch in ["h13", "h15g", "h17d", "u1"] {
        let report = preflight(&[("y", &y)], AneArch::new(arch).unwrap()).unwrap();
        assert!(report.is_legal(), "{report}");
        assert_eq!(report.findings.len(), 1, "{report}");
        assert!(matches!(
            &report.findings[0].kind,
            FindingKind::Rewritten { rewrite } if rewrite.contains("mul(x, x)")
        ));
    }
}

#[test]
fn family_limits_differ_between_m3_and_m4() {
    let x = input("x", &[1, 1, 4, 30000], DType::F32).unwrap();
    let y = x.relu().unwrap();
    let m3 = preflight(&[("y", &y)], AneArch::new("m3").unwrap()).unwrap();
    assert!(!m3.is_legal());
    assert!(m3.to_string().contains("30000 > 16384"), "{m3}");
    let m4 = preflight(&[("y", &y)], AneArch::new("m4").unwrap()).unwrap();
    assert!(m4.is_legal(), "{m4}");
}
