//! A product kernel's block structure as the shaders see it: the
//! generated WGSL of its block functions and the block scales of the
//! uniform blocks (docs/numerics.md, "Product kernels").

use std::fmt::Write as _;

use crate::kernel::Kernel;

/// A product kernel's block structure as its pipelines are compiled for
/// it: per block, its coordinates `start..end` and profile code. Part of
/// the pipeline key; the bandwidths are not (they travel in the uniform
/// block, [`block_scales`]), so a bandwidth search compiles nothing new.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ProductCode(Vec<[u32; 3]>);

// The uniform blocks hold eight block scales.
const _: () = assert!(crate::kernel::MAX_BLOCKS <= 8);

/// `1/h_b` of a product kernel's blocks as the shaders' uniform blocks
/// carry them (`block_inv_h`, two `vec4`s); zeros for a radial kernel.
pub(crate) fn block_scales(kernel: &Kernel) -> [[f32; 4]; 2] {
    let mut out = [[0.0f32; 4]; 2];
    if let Some(pb) = kernel.product_blocks() {
        for b in 0..pb.len {
            out[b / 4][b % 4] = pb.inv_h[b];
        }
    }
    out
}

impl ProductCode {
    /// The code of `kernel`; `None` for a radial kernel.
    pub(crate) fn of(kernel: &Kernel) -> Option<Self> {
        let pb = kernel.product_blocks()?;
        Some(ProductCode(
            (0..pb.len)
                .map(|b| {
                    [
                        pb.start[b] as u32,
                        pb.end[b] as u32,
                        pb.profile[b].shader_code(),
                    ]
                })
                .collect(),
        ))
    }

    /// The module `product`: the WGSL of the product's block functions
    /// (`PRODUCT`, `block_last`, `block_t`, `block_dims`, `coord_inv_h`;
    /// they read the importing shader's `block_inv_h(b)`); for `None`,
    /// their radial stand-ins, which the compiler folds away.
    pub(super) fn wgsl(code: Option<&ProductCode>) -> String {
        let Some(ProductCode(blocks)) = code else {
            return "#import profiles\n\
                    const PRODUCT: bool = false;\n\
                    fn block_last(k: u32) -> bool { return false; }\n\
                    fn block_t(k: u32, s: f32) -> f32 { return s; }\n\
                    fn block_dims(k: u32) -> u32 { return 1u; }\n\
                    fn coord_inv_h(k: u32) -> f32 { return 1.0; }\n"
                .into();
        };
        let last = |b: &[u32; 3]| b[1] - 1;
        let mut s = String::from(
            "#import profiles\n\
             // Generated: the product kernel's blocks (docs/numerics.md, \"Product kernels\").\n\
             const PRODUCT: bool = true;\n",
        );
        let ends: Vec<String> = blocks
            .iter()
            .map(|b| format!("k == {}u", last(b)))
            .collect();
        let _ = writeln!(
            s,
            "fn block_last(k: u32) -> bool {{ return {}; }}",
            ends.join(" || ")
        );
        s.push_str("fn block_t(k: u32, s: f32) -> f32 {\n");
        for b in blocks {
            let _ = writeln!(
                s,
                "    if k == {}u {{ return carrier_t({}u, s); }}",
                last(b),
                b[2]
            );
        }
        s.push_str("    return T_FAR;\n}\n");
        s.push_str("fn block_dims(k: u32) -> u32 {\n");
        for b in blocks {
            let _ = writeln!(s, "    if k == {}u {{ return {}u; }}", last(b), b[1] - b[0]);
        }
        s.push_str("    return 1u;\n}\n");
        s.push_str("fn coord_inv_h(k: u32) -> f32 {\n");
        for (i, b) in blocks.iter().enumerate() {
            let _ = writeln!(s, "    if k < {}u {{ return block_inv_h({i}u); }}", b[1]);
        }
        s.push_str("    return 1.0;\n}\n");
        s
    }
}
