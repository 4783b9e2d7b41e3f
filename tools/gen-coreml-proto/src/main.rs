//! `gen-coreml-proto FDS OUT_DIR`: prost code for a FileDescriptorSet, without protoc.

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, fds_path, out_dir] = args.as_slice() else {
        return Err("usage: gen-coreml-proto FDS OUT_DIR".into());
    };
    let bytes = std::fs::read(fds_path)?;
    let fds = prost_types::FileDescriptorSet::decode(bytes.as_slice())?;
    std::fs::create_dir_all(out_dir)?;
    // BTreeMap keeps encoded maps in key order, so exported files are byte-for-byte reproducible.
    prost_build::Config::new()
        .out_dir(out_dir)
        .btree_map(["."])
        .compile_fds(fds)?;
    Ok(())
}
