//! Handles: every object the C API hands out is an opaque, never-reused integer id that refers to
//! one reference to a shared object. Releasing an id drops that reference; the object lives on
//! while other references (ids or internal links such as port → operation) remain.

use crate::error::{Code, Result, SimError};
use crate::objects::*;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};

pub enum Object {
    CompilerConfig(Arc<CompilerConfig>),
    Compiler(Arc<Compiler>),
    CompilerOptions(Arc<CompilerOptions>),
    Library(Arc<Library>),
    Function(Arc<Function>),
    OpOptions(Arc<OpOptions>),
    Operation(Arc<Operation>),
    Port(Arc<Port>),
    Buffer(Arc<Buffer>),
    Event(Arc<Event>),
    Stream(Arc<Stream>),
    TensorDesc(Arc<TensorDesc>),
}

impl Object {
    fn kind_name(&self) -> &'static str {
        match self {
            Object::CompilerConfig(_) => CompilerConfig::NAME,
            Object::Compiler(_) => Compiler::NAME,
            Object::CompilerOptions(_) => CompilerOptions::NAME,
            Object::Library(_) => Library::NAME,
            Object::Function(_) => Function::NAME,
            Object::OpOptions(_) => OpOptions::NAME,
            Object::Operation(_) => Operation::NAME,
            Object::Port(_) => Port::NAME,
            Object::Buffer(_) => Buffer::NAME,
            Object::Event(_) => Event::NAME,
            Object::Stream(_) => Stream::NAME,
            Object::TensorDesc(_) => TensorDesc::NAME,
        }
    }
}

/// An object kind that can be looked up from a handle.
pub trait Kind: Sized {
    const NAME: &'static str;
    fn wrap(object: Arc<Self>) -> Object;
    fn unwrap(object: &Object) -> Option<&Arc<Self>>;
}

macro_rules! kinds {
    ($($ty:ident => $name:literal),* $(,)?) => {
        $(impl Kind for $ty {
            const NAME: &'static str = $name;
            fn wrap(object: Arc<Self>) -> Object {
                Object::$ty(object)
            }
            fn unwrap(object: &Object) -> Option<&Arc<Self>> {
                match object {
                    Object::$ty(o) => Some(o),
                    _ => None,
                }
            }
        })*
    };
}

kinds! {
    CompilerConfig => "compiler config options",
    Compiler => "compiler",
    CompilerOptions => "compiler options",
    Library => "program library",
    Function => "program function",
    OpOptions => "precompiled compute op create options",
    Operation => "execution stream operation",
    Port => "io port",
    Buffer => "buffer object",
    Event => "async event",
    Stream => "execution stream",
    TensorDesc => "tensor descriptor",
}

struct Registry {
    next: usize,
    objects: HashMap<usize, Object>,
}

/// Ids start high and step by 16 so they look like (and are as distinct as) aligned pointers.
const FIRST_ID: usize = 0x5100_0000;
const ID_STEP: usize = 0x10;

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

fn registry() -> MutexGuard<'static, Option<Registry>> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// Issues a new handle for one reference to `object`.
pub fn issue<T: Kind>(object: Arc<T>) -> *mut c_void {
    let mut guard = registry();
    let reg = guard.get_or_insert_with(|| Registry {
        next: FIRST_ID,
        objects: HashMap::new(),
    });
    let id = reg.next;
    reg.next += ID_STEP;
    reg.objects.insert(id, T::wrap(object));
    id as *mut c_void
}

fn describe_missing(handle: *mut c_void, expected: &str) -> SimError {
    if handle.is_null() {
        SimError::new(
            Code::InvalidHandle,
            format!("the {expected} handle is null"),
        )
    } else {
        SimError::new(
            Code::InvalidHandle,
            format!("{handle:p} is not a live {expected} (released already, or never issued)"),
        )
    }
}

/// The object behind `handle`, which must be a live handle of kind `T`.
pub fn get<T: Kind>(handle: *mut c_void) -> Result<Arc<T>> {
    let guard = registry();
    let object = guard
        .as_ref()
        .and_then(|r| r.objects.get(&(handle as usize)))
        .ok_or_else(|| describe_missing(handle, T::NAME))?;
    T::unwrap(object).cloned().ok_or_else(|| {
        SimError::new(
            Code::InvalidHandle,
            format!(
                "{handle:p} is a {}, expected a {}",
                object.kind_name(),
                T::NAME
            ),
        )
    })
}

/// Drops the reference `handle` stands for; the handle is dead afterwards.
pub fn release<T: Kind>(handle: *mut c_void) -> Result<()> {
    let removed = {
        let mut guard = registry();
        let objects = guard.as_mut().map(|r| &mut r.objects);
        match objects.and_then(|o| {
            o.get(&(handle as usize))
                .map(|obj| (T::unwrap(obj).is_some(), obj.kind_name()))
        }) {
            None => return Err(describe_missing(handle, T::NAME)),
            Some((false, found)) => {
                return Err(SimError::new(
                    Code::InvalidHandle,
                    format!("{handle:p} is a {found}, expected a {}", T::NAME),
                ))
            }
            Some((true, _)) => guard
                .as_mut()
                .and_then(|r| r.objects.remove(&(handle as usize))),
        }
    };
    // dropped outside the registry lock: object destructors may take other locks
    drop(removed);
    Ok(())
}

/// Handles issued and not yet released (for tests that check nothing leaks).
pub fn live_handles() -> usize {
    registry().as_ref().map_or(0, |r| r.objects.len())
}
