// Fills a buffer with one value: output sentinels for verification runs.
// Generated: WG (shaders::FILL_WG).

#import consts

struct FillParams {
    len: u32,
    value: f32,
}

@group(0) @binding(0) var<uniform> fp: FillParams;
@group(0) @binding(1) var<storage, read_write> target_buf: array<f32>;

@compute @workgroup_size(WG)
fn fill(@builtin(global_invocation_id) gid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let stride = nwg.x * WG;
    for (var e = gid.x; e < fp.len; e += stride) {
        target_buf[e] = fp.value;
    }
}
