//! What the pipelines take from a shader, read from its module by naga:
//! the buffer bindings of its bind group, and that its entry points are
//! there.

use std::sync::OnceLock;

use super::{SHADERS, ShaderId, ShaderSpec};

/// How a shader declares a buffer binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// `var<uniform>`: the parameter records, bound with a dynamic offset
    /// (`Bindings`, `dispatch.rs`).
    Uniform,
    /// `var<storage, read>`.
    ReadOnly,
    /// `var<storage, read_write>`.
    ReadWrite,
}

impl Access {
    /// The binding type of a bind-group layout entry.
    pub(crate) fn binding_type(self) -> wgpu::BindingType {
        let ty = match self {
            Access::Uniform => wgpu::BufferBindingType::Uniform,
            Access::ReadOnly => wgpu::BufferBindingType::Storage { read_only: true },
            Access::ReadWrite => wgpu::BufferBindingType::Storage { read_only: false },
        };
        wgpu::BindingType::Buffer {
            ty,
            has_dynamic_offset: self == Access::Uniform,
            min_binding_size: None,
        }
    }
}

/// Parses a rendered source (`name` for messages).
pub(crate) fn parse(name: &str, src: &str) -> Result<naga::Module, String> {
    naga::front::wgsl::parse_str(src)
        .map_err(|e| format!("{name} does not parse:\n{}", e.emit_to_string(src)))
}

/// The buffer bindings `module` declares, by binding index: every one in
/// group 0, numbered 0, 1, … without gaps (bind groups are built from
/// resources in binding order).
pub(crate) fn bindings(module: &naga::Module) -> Result<Vec<Access>, String> {
    let mut found: Vec<(u32, Access, &str)> = Vec::new();
    for (_, var) in module.global_variables.iter() {
        let Some(rb) = &var.binding else { continue };
        let name = var.name.as_deref().unwrap_or("?");
        if rb.group != 0 {
            return Err(format!("{name} is in group {}, not 0", rb.group));
        }
        let access = match var.space {
            naga::AddressSpace::Uniform => Access::Uniform,
            naga::AddressSpace::Storage { access }
                if access.contains(naga::StorageAccess::STORE) =>
            {
                Access::ReadWrite
            }
            naga::AddressSpace::Storage { .. } => Access::ReadOnly,
            other => return Err(format!("{name} is not a buffer binding ({other:?})")),
        };
        found.push((rb.binding, access, name));
    }
    found.sort_by_key(|b| b.0);
    for (i, &(binding, _, name)) in found.iter().enumerate() {
        if binding != i as u32 {
            return Err(format!(
                "{name} is at binding {binding}: the bindings are not 0..{}",
                found.len()
            ));
        }
    }
    Ok(found.into_iter().map(|b| b.1).collect())
}

/// Checks that `module` has a compute entry point `entry`.
pub(crate) fn check_entry(module: &naga::Module, entry: &str) -> Result<(), String> {
    match module.entry_points.iter().find(|ep| ep.name == entry) {
        Some(ep) if ep.stage == naga::ShaderStage::Compute => Ok(()),
        Some(ep) => Err(format!("entry point {entry} is a {:?} shader", ep.stage)),
        None => Err(format!("no entry point {entry}")),
    }
}

impl ShaderSpec {
    /// The bindings of its bind group, reflected from the shader rendered
    /// with the placeholder values of the table; checks that its entry
    /// point (and merge entry) is there.
    fn reflect(&self) -> Result<Vec<Access>, String> {
        let file = self.file.name;
        let src = self.id.render_example()?;
        let module = parse(file, &src)?;
        let entries = std::iter::once(self.entry).chain(self.merge.map(|(_, e)| e));
        for entry in entries {
            check_entry(&module, entry).map_err(|e| format!("{file}: {e}"))?;
        }
        bindings(&module).map_err(|e| format!("{file}: {e}"))
    }
}

/// Every shader's bindings, by the [`SHADERS`] entry that declares it.
/// The sources are fixed at build time, so they are reflected once per
/// process, when the first device opens.
fn reflected() -> Result<&'static [Vec<Access>], String> {
    static REFLECTED: OnceLock<Result<Vec<Vec<Access>>, String>> = OnceLock::new();
    REFLECTED
        .get_or_init(|| SHADERS.iter().map(ShaderSpec::reflect).collect())
        .as_deref()
        .map_err(Clone::clone)
}

impl ShaderId {
    /// The bindings of the shader's bind group (its base's, for a merge
    /// entry), in binding order, as naga reads them from the shader
    /// rendered with the placeholder values of its entry in [`SHADERS`].
    ///
    /// # Errors
    /// A message when a shader does not render, parse or reflect, or
    /// lacks an entry point (a registry bug the tests catch).
    pub(crate) fn bindings(self) -> Result<&'static [Access], String> {
        let base = self.base();
        let at = SHADERS
            .iter()
            .position(|s| s.id == base)
            .expect("a base shader is in SHADERS"); // ok: base() comes from SHADERS
        Ok(&reflected()?[at])
    }
}
