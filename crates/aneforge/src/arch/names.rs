//! The ANE compiler's 28 architecture strings, the capability family each belongs to, and the
//! friendly aliases (`m1`…`m5`, `a13`…`a18`).
//!
//! Families group architectures that accept the same MIL: `A13` (M1), `A14` (M2), `A15` (M3) and
//! `A16` (M4, M5 and every A16/A17/A18 part). Architectures below A13 predate MIL support on the
//! ANE; naming one is an error, as is any unknown string (Apple's compiler silently falls back
//! to the host chip for unknown names; we do not).

use super::ArchError;
use std::fmt;

/// A MIL-capable ANE capability family, ordered oldest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    A13,
    A14,
    A15,
    A16,
}

impl Family {
    pub const ALL: [Family; 4] = [Family::A13, Family::A14, Family::A15, Family::A16];

    /// `A13/M1`, `A14/M2`, `A15/M3`, `A16+/M4–M5`.
    pub fn name(self) -> &'static str {
        match self {
            Family::A13 => "A13/M1",
            Family::A14 => "A14/M2",
            Family::A15 => "A15/M3",
            Family::A16 => "A16+/M4-M5",
        }
    }

    /// The base architecture of the family (`h13` … `h16`).
    pub fn base_arch(self) -> AneArch {
        let name = match self {
            Family::A13 => "h13",
            Family::A14 => "h14",
            Family::A15 => "h15",
            Family::A16 => "h16",
        };
        AneArch::by_table_name(name).unwrap_or_default()
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One row of the architecture table.
#[derive(Debug, PartialEq, Eq)]
pub struct ArchInfo {
    /// The compiler's architecture string, lower case.
    pub name: &'static str,
    /// `None` for architectures below the MIL floor.
    pub family: Option<Family>,
    /// NE core count decoded from the suffix (base 4, `g` 8, `s` 16, `c` 32, `d` 64); `None` where
    /// the name does not encode it.
    pub cores: Option<u32>,
    /// What silicon the string stands for.
    pub silicon: &'static str,
    /// The chip whose published figures the cost estimate uses (see `estimate.rs`).
    pub chip: Chip,
}

/// Chips with published Neural Engine and memory figures; architectures map onto the chip of
/// their generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Chip {
    M1,
    M2,
    M3,
    M4,
    M5,
    /// Below the MIL floor: no estimate.
    None,
}

const fn arch(
    name: &'static str,
    family: Option<Family>,
    cores: Option<u32>,
    silicon: &'static str,
    chip: Chip,
) -> ArchInfo {
    ArchInfo {
        name,
        family,
        cores,
        silicon,
        chip,
    }
}

use Family::*;

/// Every architecture the compiler knows, in family order.
pub static ARCHS: [ArchInfo; 28] = [
    arch(
        "h11",
        None,
        None,
        "pre-A13 (below the MIL floor)",
        Chip::None,
    ),
    arch(
        "h12",
        None,
        None,
        "pre-A13 (below the MIL floor)",
        Chip::None,
    ),
    arch(
        "m9",
        None,
        None,
        "pre-A13 (below the MIL floor)",
        Chip::None,
    ),
    arch(
        "t0",
        None,
        None,
        "pre-A13 (below the MIL floor)",
        Chip::None,
    ),
    arch("h13", Some(A13), Some(4), "A13, M1", Chip::M1),
    arch("h13g", Some(A13), Some(8), "M1 Pro/Max/Ultra", Chip::M1),
    arch("t1", Some(A13), Some(4), "A13 reference", Chip::M1),
    arch("h14", Some(A14), Some(4), "A14, M2", Chip::M2),
    arch("h14g", Some(A14), Some(8), "M2 Pro/Max", Chip::M2),
    arch("h14c", Some(A14), Some(32), "A14 Max-class", Chip::M2),
    arch("h15", Some(A15), Some(4), "A15, M3", Chip::M3),
    arch("h15g", Some(A15), Some(8), "M3 Pro/Max", Chip::M3),
    arch("h15c", Some(A15), Some(32), "A15 Max-class", Chip::M3),
    arch("m11", Some(A15), Some(1), "small embedded ANE", Chip::M3),
    arch("h16", Some(A16), Some(4), "A16, M4", Chip::M4),
    arch("h16g", Some(A16), Some(8), "M4 Pro/Max", Chip::M4),
    arch("h16c", Some(A16), Some(32), "A16 Max-class", Chip::M4),
    arch("h16s", Some(A16), Some(16), "A16 Pro-class", Chip::M4),
    arch("h17", Some(A16), Some(4), "A17, M5", Chip::M5),
    arch("h17a", Some(A16), Some(4), "A17 variant", Chip::M5),
    arch("h17g", Some(A16), Some(8), "M5 Pro/Max", Chip::M5),
    arch("h17s", Some(A16), Some(16), "A17 Pro-class, M5", Chip::M5),
    arch("h17c", Some(A16), Some(32), "A17 Max-class", Chip::M5),
    arch("h17d", Some(A16), Some(64), "A17 Ultra-class", Chip::M5),
    arch("h18", Some(A16), Some(4), "A18", Chip::M5),
    arch(
        "u1",
        Some(A13),
        Some(4),
        "reference target (not silicon)",
        Chip::M1,
    ),
    arch(
        "u2",
        Some(A13),
        Some(4),
        "reference target (not silicon)",
        Chip::M1,
    ),
    arch(
        "u3",
        Some(A13),
        Some(4),
        "reference target (not silicon)",
        Chip::M1,
    ),
];

/// Friendly names: the M-series chip `mN` is architecture `h(N+12)`, `aN` is `hN`.
pub static ALIASES: [(&str, &str); 11] = [
    ("m1", "h13"),
    ("m2", "h14"),
    ("m3", "h15"),
    ("m4", "h16"),
    ("m5", "h17"),
    ("a13", "h13"),
    ("a14", "h14"),
    ("a15", "h15"),
    ("a16", "h16"),
    ("a17", "h17"),
    ("a18", "h18"),
];

/// A MIL-capable ANE architecture. Equality and hashing are by architecture string.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct AneArch {
    index: usize,
}

impl AneArch {
    /// Parses an architecture string or alias, case-insensitively (`h16`, `H15g`, `m1`, `a17`).
    pub fn new(name: &str) -> Result<AneArch, ArchError> {
        let lower = name.trim().to_ascii_lowercase();
        let resolved = ALIASES
            .iter()
            .find(|(alias, _)| *alias == lower)
            .map_or(lower.as_str(), |(_, arch)| arch);
        let Some(index) = ARCHS.iter().position(|a| a.name == resolved) else {
            return Err(ArchError::UnknownArch {
                name: name.to_string(),
                valid: valid_names(),
            });
        };
        if ARCHS[index].family.is_none() {
            return Err(ArchError::BelowMilFloor {
                name: name.to_string(),
            });
        }
        Ok(AneArch { index })
    }

    fn by_table_name(name: &str) -> Option<AneArch> {
        ARCHS
            .iter()
            .position(|a| a.name == name && a.family.is_some())
            .map(|index| AneArch { index })
    }

    /// Every MIL-capable architecture, in table order.
    pub fn all() -> impl Iterator<Item = AneArch> {
        (0..ARCHS.len())
            .filter(|&i| ARCHS[i].family.is_some())
            .map(|index| AneArch { index })
    }

    pub fn info(&self) -> &'static ArchInfo {
        &ARCHS[self.index]
    }

    pub fn name(&self) -> &'static str {
        self.info().name
    }

    pub fn family(&self) -> Family {
        self.info().family.unwrap_or(Family::A13)
    }

    pub fn cores(&self) -> Option<u32> {
        self.info().cores
    }

    pub fn chip(&self) -> Chip {
        self.info().chip
    }
}

impl Default for AneArch {
    /// `h16` (A16+/M4).
    fn default() -> Self {
        AneArch { index: 14 }
    }
}

impl fmt::Debug for AneArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AneArch({})", self.name())
    }
}

impl fmt::Display for AneArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for AneArch {
    type Err = ArchError;
    fn from_str(s: &str) -> Result<AneArch, ArchError> {
        AneArch::new(s)
    }
}

/// The accepted names, for error messages: every MIL-capable architecture, then the aliases.
pub fn valid_names() -> String {
    let archs: Vec<&str> = AneArch::all().map(|a| a.name()).collect();
    let aliases: Vec<&str> = ALIASES.iter().map(|(a, _)| *a).collect();
    format!(
        "architectures {}; aliases {}",
        archs.join(", "),
        aliases.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_h16() {
        assert_eq!(AneArch::default().name(), "h16");
        assert_eq!(AneArch::default().family(), Family::A16);
    }

    #[test]
    fn family_base_archs_resolve() {
        for f in Family::ALL {
            assert_eq!(f.base_arch().family(), f);
        }
    }
}
