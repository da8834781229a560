//! `simplysync-relay` — grows into the full relay (see the relay issue). For now it prints the
//! wire version it speaks, proving the workspace links the shared protocol crate.

fn main() {
    println!("simplysync-relay {} (protocol crate {})", env!("CARGO_PKG_VERSION"), simplysync::VERSION);
}
