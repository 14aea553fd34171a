//! The shader registry: every `shaders/*.wgsl` file, listed once.
//!
//! Shaders are specialized two ways: pipeline `override` constants for
//! scalars (the kernel profile), and `{{NAME}}` placeholders for what
//! overrides cannot express (sizes of private and workgroup arrays).

/// Shared kernel-profile functions, prepended to the distance-kernel shaders.
const PROFILES: &str = include_str!("../../shaders/profiles.wgsl");

/// One compute shader of the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ShaderId {
    /// `shaders/local_mean.wgsl`: fused local mean / row sums.
    LocalMean,
    /// `shaders/kernel_matrix.wgsl`: kernel-matrix blocks.
    KernelMatrix,
    /// `shaders/fill.wgsl`: output sentinels.
    Fill,
    /// `shaders/knn.wgsl`: k nearest neighbours.
    Knn,
    /// `shaders/mean_shift.wgsl`: MeanShift gather / move / compact.
    MeanShift,
    /// `shaders/softmax.wgsl`: kernel softmax (attention), one pass.
    Softmax,
    /// `shaders/softmax_matrix.wgsl`: softmax weight-matrix blocks.
    SoftmaxMatrix,
    /// `shaders/feature_mean.wgsl`, entry `chunk_sums`.
    FeatureSums,
    /// `shaders/feature_mean.wgsl`, entry `prefix`.
    FeaturePrefix,
    /// `shaders/feature_mean.wgsl`, entry `finish`.
    FeatureFinish,
}

impl ShaderId {
    /// Every shader.
    pub(crate) const ALL: [ShaderId; 10] = [
        ShaderId::LocalMean,
        ShaderId::KernelMatrix,
        ShaderId::Fill,
        ShaderId::Knn,
        ShaderId::MeanShift,
        ShaderId::Softmax,
        ShaderId::SoftmaxMatrix,
        ShaderId::FeatureSums,
        ShaderId::FeaturePrefix,
        ShaderId::FeatureFinish,
    ];

    /// File name under `shaders/`.
    pub(crate) fn file(self) -> &'static str {
        match self {
            ShaderId::LocalMean => "local_mean.wgsl",
            ShaderId::KernelMatrix => "kernel_matrix.wgsl",
            ShaderId::Fill => "fill.wgsl",
            ShaderId::Knn => "knn.wgsl",
            ShaderId::MeanShift => "mean_shift.wgsl",
            ShaderId::Softmax => "softmax.wgsl",
            ShaderId::SoftmaxMatrix => "softmax_matrix.wgsl",
            ShaderId::FeatureSums | ShaderId::FeaturePrefix | ShaderId::FeatureFinish => {
                "feature_mean.wgsl"
            }
        }
    }

    fn body(self) -> &'static str {
        match self {
            ShaderId::LocalMean => include_str!("../../shaders/local_mean.wgsl"),
            ShaderId::KernelMatrix => include_str!("../../shaders/kernel_matrix.wgsl"),
            ShaderId::Fill => include_str!("../../shaders/fill.wgsl"),
            ShaderId::Knn => include_str!("../../shaders/knn.wgsl"),
            ShaderId::MeanShift => include_str!("../../shaders/mean_shift.wgsl"),
            ShaderId::Softmax => include_str!("../../shaders/softmax.wgsl"),
            ShaderId::SoftmaxMatrix => include_str!("../../shaders/softmax_matrix.wgsl"),
            ShaderId::FeatureSums | ShaderId::FeaturePrefix | ShaderId::FeatureFinish => {
                include_str!("../../shaders/feature_mean.wgsl")
            }
        }
    }

    /// Entry point.
    pub(crate) fn entry(self) -> &'static str {
        match self {
            ShaderId::LocalMean => "accumulate",
            ShaderId::KernelMatrix => "entries",
            ShaderId::Fill => "fill",
            ShaderId::Knn => "nearest",
            ShaderId::MeanShift => "step",
            ShaderId::Softmax => "attend",
            ShaderId::SoftmaxMatrix => "entries",
            ShaderId::FeatureSums => "chunk_sums",
            ShaderId::FeaturePrefix => "prefix",
            ShaderId::FeatureFinish => "finish",
        }
    }

    /// Whether the shader uses `profiles.wgsl` (and its `PROFILE` override).
    pub(crate) fn uses_profiles(self) -> bool {
        matches!(self, ShaderId::LocalMean | ShaderId::KernelMatrix)
    }

    /// The placeholders the shader needs.
    pub(crate) fn placeholders(self) -> &'static [&'static str] {
        match self {
            ShaderId::LocalMean => &["D", "QT", "QA", "STAGE"],
            ShaderId::KernelMatrix => &["D"],
            ShaderId::Fill | ShaderId::SoftmaxMatrix => &[],
            ShaderId::Knn => &["D", "K", "STAGE"],
            ShaderId::MeanShift => &["D"],
            ShaderId::Softmax => &["D4", "QA4", "BK"],
            ShaderId::FeatureSums | ShaderId::FeaturePrefix | ShaderId::FeatureFinish => &["QA"],
        }
    }

    /// The full WGSL source with the placeholders replaced.
    pub(crate) fn render(self, values: &[(&str, u32)]) -> Result<String, String> {
        let mut src = String::new();
        if self.uses_profiles() {
            src.push_str(PROFILES);
            src.push('\n');
        }
        src.push_str(self.body());
        for &name in self.placeholders() {
            let v = values
                .iter()
                .find(|(n, _)| *n == name)
                .ok_or_else(|| format!("{}: no value for {{{{{name}}}}}", self.file()))?;
            src = src.replace(&format!("{{{{{name}}}}}", name = name), &v.1.to_string());
        }
        if let Some(pos) = src.find("{{") {
            let end = src[pos..].find("}}").map_or(src.len(), |e| pos + e + 2);
            return Err(format!(
                "{}: unknown placeholder {}",
                self.file(),
                &src[pos..end]
            ));
        }
        Ok(src)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values exercising each placeholder at small and large sizes.
    fn samples(id: ShaderId) -> Vec<Vec<(&'static str, u32)>> {
        match id {
            ShaderId::LocalMean => vec![
                vec![("D", 1), ("QT", 0), ("QA", 1), ("STAGE", 256)],
                vec![("D", 3), ("QT", 3), ("QA", 3), ("STAGE", 256)],
                vec![("D", 64), ("QT", 8), ("QA", 8), ("STAGE", 112)],
            ],
            ShaderId::KernelMatrix => vec![vec![("D", 1)], vec![("D", 7)], vec![("D", 300)]],
            ShaderId::Fill | ShaderId::SoftmaxMatrix => vec![vec![]],
            ShaderId::Knn => vec![
                vec![("D", 1), ("K", 1), ("STAGE", 256)],
                vec![("D", 16), ("K", 16), ("STAGE", 256)],
                vec![("D", 7), ("K", 128), ("STAGE", 64)],
            ],
            ShaderId::MeanShift => vec![vec![("D", 1)], vec![("D", 2)], vec![("D", 64)]],
            ShaderId::Softmax => vec![
                vec![("D4", 1), ("QA4", 1), ("BK", 32)],
                vec![("D4", 1), ("QA4", 1), ("BK", 7)],
                vec![("D4", 16), ("QA4", 16), ("BK", 32)],
                vec![("D4", 20), ("QA4", 5), ("BK", 1)],
            ],
            ShaderId::FeatureSums | ShaderId::FeaturePrefix | ShaderId::FeatureFinish => {
                vec![vec![("QA", 1)], vec![("QA", 16)]]
            }
        }
    }

    fn validate(name: &str, src: &str) {
        let module = naga::front::wgsl::parse_str(src)
            .unwrap_or_else(|e| panic!("{name} does not parse:\n{}", e.emit_to_string(src)));
        naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::all(),
        )
        .validate(&module)
        .unwrap_or_else(|e| panic!("{name} does not validate:\n{}", e.emit_to_string(src)));
    }

    #[test]
    fn every_shader_file_is_registered_and_validates() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/shaders");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .expect("shaders/ exists")
            .map(|e| {
                e.expect("readable entry")
                    .file_name()
                    .into_string()
                    .expect("utf-8 name")
            })
            .filter(|n| n.ends_with(".wgsl"))
            .collect();
        files.sort();
        assert!(!files.is_empty());
        for file in &files {
            if file == "profiles.wgsl" {
                validate(file, PROFILES);
                continue;
            }
            let id = ShaderId::ALL
                .into_iter()
                .find(|id| id.file() == file)
                .unwrap_or_else(|| panic!("shaders/{file} is not in the registry"));
            for values in samples(id) {
                let src = id.render(&values).expect("placeholders filled");
                validate(&format!("{file} {values:?}"), &src);
            }
        }
    }

    #[test]
    fn missing_placeholder_values_are_reported() {
        assert!(ShaderId::LocalMean.render(&[("D", 3)]).is_err());
    }
}
