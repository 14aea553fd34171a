//! `.npy` files for the CLI tests: headers as they are written (or
//! forged), sparse files of zeros that cost no disk, and `prlimit` for the
//! address-space caps.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A version 1.0 `.npy`: magic, header `dict` padded to 64 bytes, `data`.
pub fn raw_npy(dict: &str, data: &[u8]) -> Vec<u8> {
    let total = (10 + dict.len() + 1).div_ceil(64) * 64;
    let hlen = total - 10;
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(hlen as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.resize(out.len() + hlen - dict.len() - 1, b' ');
    out.push(b'\n');
    out.extend_from_slice(data);
    out
}

/// A `.npy` of `f32` zeros of `shape` in `dir`, its data a hole in a
/// sparse file.
pub fn sparse_npy(dir: &Path, name: &str, shape: &[u64]) -> PathBuf {
    let dims = match shape {
        [n] => format!("({n},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let header = raw_npy(
        &format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {dims}, }}"),
        &[],
    );
    let p = dir.join(name);
    let f = std::fs::File::create(&p).unwrap();
    std::io::Write::write_all(&mut &f, &header).unwrap();
    f.set_len(header.len() as u64 + shape.iter().product::<u64>() * 4)
        .unwrap();
    p
}

/// `prlimit`, or a printed reason why a test that needs it is skipped.
pub fn prlimit() -> Option<&'static str> {
    let ok = Command::new("prlimit")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("SKIPPED: prlimit (util-linux) is not installed; address-space caps not tested");
    }
    ok.then_some("prlimit")
}
