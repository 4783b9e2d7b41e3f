//! The CPU engine's kernel schedule, chosen once per process: the widest instruction set both the
//! CPU and `ANEFORGE_CPU_KERNELS` allow. Every kernel with hand-written SIMD asks here, so forcing
//! a narrower schedule (`portable`, `avx2`) runs the same suites through the other code paths on
//! an AVX-512 machine (and `portable` on aarch64 turns the NEON kernels off). The `gemm` crate behind large f32 products does its own detection.
//!
//! `simd_dispatch!` compiles a body three times on x86-64 — baseline, AVX2+FMA+F16C, and AVX-512
//! (F/BW/VL) — and calls the copy the schedule allows.

use std::sync::OnceLock;

/// Environment variable choosing a narrower schedule: `portable`, `avx2`, `avx512`, `neon` or
/// `native` (unset).
pub const KERNELS_ENV: &str = "ANEFORGE_CPU_KERNELS";

/// Instruction-set classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// Plain Rust the compiler vectorises for the build's baseline (SSE2 on x86-64, NEON on
    /// aarch64), no hand-written kernels.
    Portable,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX-512 F/BW/VL with AVX2 + FMA + F16C (VNNI reported separately).
    Avx512,
    /// aarch64's Advanced SIMD (always present there), with hand-written kernels where they exist.
    Neon,
}

impl Schedule {
    pub fn name(self) -> &'static str {
        match self {
            Schedule::Portable => "portable",
            Schedule::Avx2 => "avx2",
            Schedule::Avx512 => "avx512",
            Schedule::Neon => "neon",
        }
    }

    /// Whether a CPU whose widest schedule is `best` can run this one.
    fn runs_on(self, best: Schedule) -> bool {
        self == best
            || self == Schedule::Portable
            || (self == Schedule::Avx2 && best == Schedule::Avx512)
    }

    fn parse(s: &str) -> Option<Option<Schedule>> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "native" => Some(None),
            "portable" | "generic" => Some(Some(Schedule::Portable)),
            "avx2" => Some(Some(Schedule::Avx2)),
            "avx512" => Some(Some(Schedule::Avx512)),
            "neon" => Some(Some(Schedule::Neon)),
            _ => None,
        }
    }
}

struct Chosen {
    schedule: Schedule,
    vnni: bool,
    note: Option<String>,
}

fn detected() -> (Schedule, bool) {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c");
        let avx512 = avx2
            && std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vl");
        let vnni = avx512 && std::is_x86_feature_detected!("avx512vnni");
        let schedule = if avx512 {
            Schedule::Avx512
        } else if avx2 {
            Schedule::Avx2
        } else {
            Schedule::Portable
        };
        (schedule, vnni)
    }
    #[cfg(target_arch = "aarch64")]
    {
        (Schedule::Neon, false)
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        (Schedule::Portable, false)
    }
}

fn chosen() -> &'static Chosen {
    static CHOSEN: OnceLock<Chosen> = OnceLock::new();
    CHOSEN.get_or_init(|| {
        let (best, vnni) = detected();
        let asked = std::env::var(KERNELS_ENV).unwrap_or_default();
        let (schedule, note) = match Schedule::parse(&asked) {
            Some(None) => (best, None),
            Some(Some(cap)) if cap.runs_on(best) => {
                (cap, Some(format!("{KERNELS_ENV}={asked}")))
            }
            Some(Some(cap)) => (
                best,
                Some(format!(
                    "{KERNELS_ENV}={asked} asks for {} but this CPU runs {} at most",
                    cap.name(),
                    best.name()
                )),
            ),
            None => (
                best,
                Some(format!(
                    "{KERNELS_ENV}={asked} is not one of portable, avx2, avx512, neon, native; ignored"
                )),
            ),
        };
        if let Some(note) = note
            .as_deref()
            .filter(|n| n.contains("ignored") || n.contains("supports"))
        {
            log::warn!("{note}");
        }
        Chosen {
            schedule,
            vnni: vnni && schedule == Schedule::Avx512,
            note,
        }
    })
}

/// The schedule every hand-written kernel follows in this process.
#[inline]
pub fn schedule() -> Schedule {
    chosen().schedule
}

#[inline]
pub fn has_avx2_fma() -> bool {
    matches!(schedule(), Schedule::Avx2 | Schedule::Avx512)
}

#[inline]
pub fn has_avx512() -> bool {
    schedule() == Schedule::Avx512
}

/// The hand-written aarch64 kernels (off under a forced `portable` schedule).
#[inline]
pub fn has_neon() -> bool {
    schedule() == Schedule::Neon
}

/// AVX-512 VNNI (the int8-activation GEMV), only under the AVX-512 schedule.
#[inline]
pub fn has_avx512_vnni() -> bool {
    chosen().vnni
}

/// The CPU's model name as the OS reports it.
pub fn cpu_model() -> String {
    #[cfg(target_os = "linux")]
    {
        if let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") {
            for line in info.lines() {
                let mut kv = line.splitn(2, ':');
                let (k, v) = (
                    kv.next().unwrap_or("").trim(),
                    kv.next().unwrap_or("").trim(),
                );
                if (k == "model name" || k == "Model" || k == "CPU part") && !v.is_empty() {
                    return v.to_string();
                }
            }
        }
    }
    #[cfg(target_os = "macos")]
    {
        if let Ok(out) = std::process::Command::new("sysctl")
            .args(["-n", "machdep.cpu.brand_string"])
            .output()
        {
            let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if !s.is_empty() {
                return s;
            }
        }
    }
    std::env::consts::ARCH.to_string()
}

/// One line for benchmark logs: the CPU and the kernel schedule chosen on it, e.g.
/// `AMD EPYC 9B45; kernels avx512+vnni (x86_64)`; `+amx-bf16` when bf16 products
/// (`MatmulPrecision::Bf16`) run on AMX tiles in this process.
pub fn describe() -> String {
    let c = chosen();
    let mut s = format!(
        "{}; kernels {}{}{} ({})",
        cpu_model(),
        c.schedule.name(),
        if c.vnni { "+vnni" } else { "" },
        if crate::kernels::bf16::uses_amx() {
            "+amx-bf16"
        } else {
            ""
        },
        std::env::consts::ARCH
    );
    if let Some(note) = &c.note {
        s.push_str(&format!("; {note}"));
    }
    s
}

#[macro_export]
#[doc(hidden)]
macro_rules! simd_dispatch {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$m])*
        #[allow(clippy::too_many_arguments)]
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            fn inner($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn fast512($($arg: $ty),*) $(-> $ret)? { inner($($arg),*) }
                if $crate::simd::has_avx512() {
                    // SAFETY: the features were detected at run time.
                    return unsafe { fast512($($arg),*) };
                }
                #[target_feature(enable = "avx2,fma,f16c")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn fast($($arg: $ty),*) $(-> $ret)? { inner($($arg),*) }
                if $crate::simd::has_avx2_fma() {
                    // SAFETY: the features were detected at run time.
                    return unsafe { fast($($arg),*) };
                }
            }
            inner($($arg),*)
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_names_parse_and_order() {
        assert_eq!(Schedule::parse(""), Some(None));
        assert_eq!(Schedule::parse("native"), Some(None));
        assert_eq!(Schedule::parse(" AVX2 "), Some(Some(Schedule::Avx2)));
        assert_eq!(Schedule::parse("portable"), Some(Some(Schedule::Portable)));
        assert_eq!(Schedule::parse("avx512"), Some(Some(Schedule::Avx512)));
        assert_eq!(Schedule::parse("neon"), Some(Some(Schedule::Neon)));
        assert_eq!(Schedule::parse("sse9"), None);
        assert!(Schedule::Avx2.runs_on(Schedule::Avx512));
        assert!(Schedule::Portable.runs_on(Schedule::Neon));
        assert!(!Schedule::Avx512.runs_on(Schedule::Avx2));
        assert!(!Schedule::Neon.runs_on(Schedule::Avx512));
        assert!(!Schedule::Avx2.runs_on(Schedule::Neon));
    }

    /// The schedule in force is the one asked for when the CPU has it (scripts/test.sh runs the
    /// suites under each), never wider than the CPU.
    #[test]
    fn the_asked_schedule_is_in_force() {
        let (best, vnni) = detected();
        assert!(schedule().runs_on(best));
        match std::env::var(KERNELS_ENV)
            .ok()
            .and_then(|v| Schedule::parse(&v))
        {
            Some(Some(asked)) if asked.runs_on(best) => assert_eq!(schedule(), asked),
            _ => assert_eq!(schedule(), best),
        }
        assert_eq!(has_avx512_vnni(), vnni && schedule() == Schedule::Avx512);
        assert!(describe().contains(schedule().name()));
    }
}
