//! The interpreter on small shaders whose counts are known by hand.

use super::*;

fn count(body: &str) -> Cost {
    let src = format!(
        "@group(0) @binding(0) var<storage, read> a: array<f32>;\n\
         @group(0) @binding(1) var<storage, read_write> o: array<f32>;\n\
         var<workgroup> w: array<vec4<f32>, 64>;\n\
         const R: u32 = 4u;\n\
         override FLAG: u32 = 0u;\n\
         @compute @workgroup_size(64)\n\
         fn main(@builtin(local_invocation_index) lid: u32) {{\n{body}\n}}\n"
    );
    hot_loop(&src, "main", &[("FLAG", 1.0)]).unwrap()
}

/// A data-bounded loop counts one iteration; a constant-bounded inner
/// loop is unrolled and its constant branch folded; arithmetic on
/// unknown data counts per component.
#[test]
fn counts_one_iteration_of_a_data_loop_with_unrolled_inner_loops() {
    let c = count(
        "var acc = vec4<f32>(0.0);
         let n = u32(a[0]);
         // cost: hot loop
         for (var j = 0u; j < n; j++) {
             let x = w[j % 64u];
             for (var r = 0u; r < R; r++) {
                 if FLAG == 1u {
                     acc = fma(x, x, acc);
                 } else {
                     acc += x;
                 }
             }
         }
         o[0] = acc.x;",
    );
    // j < n and the branch on it, j % 64, j + 1; one workgroup load;
    // four vec4 FMAs.
    assert_eq!(c.wg_load, 1);
    assert_eq!(c.fma, 16);
    assert_eq!(c.branch, 1);
    assert_eq!(c.alu, 16 + 3);
    assert_eq!(c.slots(), 16 + 3 + 1 + 1);
}

/// A constant test inside an unrolled loop breaks out of that loop
/// only; the outer loop, bounded by data, counts once.
#[test]
fn a_constant_break_leaves_only_its_loop() {
    let c = count(
        "var s = 0.0;
         // cost: hot loop
         for (var j = lid; j < 100u; j += 64u) {
             for (var c = 0u; c < 4u; c++) {
                 if c >= 3u {
                     break;
                 }
                 s += a[j * 4u + c];
             }
         }
         o[lid] = s;",
    );
    assert_eq!(c.global_load, 3);
    // j < 100, j + 64, j·4 once (a common subexpression), 3 × (+ c,
    // the add to s).
    assert_eq!(c.alu, 3 + 6);
    assert_eq!(c.branch, 1);
}

/// What reaches no store or branch costs nothing; loads of a local
/// array at an unknown index go to local memory.
#[test]
fn dead_values_are_free_and_unknown_local_indices_are_local_memory() {
    let c = count(
        "var t: array<f32, 8>;
         // cost: hot loop
         for (var j = 0u; j < 8u; j++) {
             let dead = a[j] * 3.0 + 1.0;
             t[j] = a[j];
             o[j] = t[lid % 8u];
         }",
    );
    assert_eq!(c.local, 8);
    assert_eq!(c.global_load, 8);
    assert_eq!(c.global_store, 8);
    // lid % 8 per iteration; `dead` is never used.
    assert_eq!(c.alu, 8);
}

/// A branch marked rare costs the branch, not its sides.
#[test]
fn rare_branches_count_as_not_taken() {
    let c = count(
        "var s = 0.0;
         // cost: hot loop
         for (var j = lid; j < 100u; j += 64u) {
             let x = a[j];
             // cost: rare
             if x > 0.5 {
                 s += exp2(x) * 3.0;
             }
         }
         o[lid] = s;",
    );
    assert_eq!((c.sfu, c.branch, c.global_load), (0, 2, 1));
    // j < 100, j + 64, x > 0.5.
    assert_eq!(c.alu, 3);
}

#[test]
fn values_carried_out_of_the_loop_are_live() {
    let c = count(
        "var s: array<f32, 4>;
         let n = u32(a[0]);
         for (var b = 0u; b < n; b += 64u) {
             var ss: array<f32, 4>;
             // cost: hot loop
             for (var j = 0u; j < n; j++) {
                 for (var r = 0u; r < R; r++) {
                     ss[r] += exp2(a[j + r]);
                 }
             }
             for (var r = 0u; r < R; r++) {
                 s[r] = fma(s[r], 2.0, ss[r]);
             }
         }
         for (var r = 0u; r < R; r++) {
             if lid < 7u {
                 o[r] = s[r];
             }
         }",
    );
    assert_eq!(c.sfu, 4);
}
