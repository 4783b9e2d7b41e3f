//! In-process cache of CPU plans by program content hash and function: the same program compiles
//! once.

use super::EngineError;
use aneforge_cpu::Plan;
use aneforge_mil::ProgramDir;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

const CAPACITY: usize = 64;

/// Program content hash, function, and the CPU compile choices that change the plan.
type PlanKey = ([u8; 32], String, super::EngineOptions);

#[derive(Default)]
struct Cache {
    plans: HashMap<PlanKey, Arc<Plan>>,
    order: VecDeque<PlanKey>,
    compiles: HashMap<[u8; 32], usize>,
    hits: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheStats {
    pub entries: usize,
    pub hits: u64,
}

fn cache() -> &'static Mutex<Cache> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(Cache::default()))
}

fn lock() -> std::sync::MutexGuard<'static, Cache> {
    cache()
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How many times the CPU engine has compiled the program with this content hash.
pub fn compile_count(hash: &[u8; 32]) -> usize {
    lock().compiles.get(hash).copied().unwrap_or(0)
}

pub fn cache_stats() -> CacheStats {
    let c = lock();
    CacheStats {
        entries: c.plans.len(),
        hits: c.hits,
    }
}

/// The plan for one function of `program` (whose content hash is `hash`), compiled on first use.
pub(crate) fn cpu_plan(
    program: &ProgramDir,
    hash: [u8; 32],
    function: &str,
    options: super::EngineOptions,
) -> Result<Arc<Plan>, EngineError> {
    let key = (hash, function.to_string(), options);
    {
        let mut c = lock();
        if let Some(plan) = c.plans.get(&key).cloned() {
            c.hits += 1;
            return Ok(plan);
        }
    }
    let plan = compile(program, function, options)?;
    let mut c = lock();
    *c.compiles.entry(hash).or_insert(0) += 1;
    if let Some(existing) = c.plans.get(&key).cloned() {
        return Ok(existing);
    }
    if c.order.len() >= CAPACITY {
        if let Some(old) = c.order.pop_front() {
            c.plans.remove(&old);
        }
    }
    c.order.push_back(key.clone());
    c.plans.insert(key, plan.clone());
    Ok(plan)
}

/// Plans one function of `program` on the CPU engine, bypassing the cache.
pub(crate) fn compile(
    program: &ProgramDir,
    function: &str,
    options: super::EngineOptions,
) -> Result<Arc<Plan>, EngineError> {
    Ok(aneforge_cpu::compile_dir(
        program,
        function,
        &aneforge_cpu::CompileOptions {
            activations: options.activations,
            accumulation: options.accumulation,
            matmul: options.matmul,
            fuse: !options.inspect,
            ..Default::default()
        },
    )?)
}
