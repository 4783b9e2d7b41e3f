//! Ctrl-C in `chat`: during a reply it stops that reply; anywhere else it ends the program (exit
//! status 130, as a shell reports an interrupted command).

use std::sync::atomic::{AtomicBool, Ordering};

static REPLYING: AtomicBool = AtomicBool::new(false);
static STOP: AtomicBool = AtomicBool::new(false);

pub fn install() -> anyhow::Result<()> {
    ctrlc::set_handler(|| {
        if REPLYING.load(Ordering::SeqCst) {
            STOP.store(true, Ordering::SeqCst);
        } else {
            eprintln!();
            std::process::exit(130);
        }
    })?;
    Ok(())
}

/// While it lives, Ctrl-C stops the reply instead of the program.
pub struct Reply(());

impl Reply {
    pub fn begin() -> Reply {
        STOP.store(false, Ordering::SeqCst);
        REPLYING.store(true, Ordering::SeqCst);
        Reply(())
    }

    pub fn stopped(&self) -> bool {
        STOP.load(Ordering::SeqCst)
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        REPLYING.store(false, Ordering::SeqCst);
    }
}
