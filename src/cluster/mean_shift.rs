//! The MeanShift driver: seeds, centring, the backend's iterations, then
//! the post-processing of `postprocess.rs`.

use ndarray::{Array1, Array2, ArrayView2};
use rayon::prelude::*;

use super::params::{MeanShiftValidParams, Seeds};
use super::postprocess::{label, select_modes};
use crate::engine::Engine;
use crate::error::ClusterError;
use crate::error::Result;
use crate::kernel::Kernel;
use crate::matrix::{Matrix, try_collect, try_copy, try_owned, try_vec};
use crate::types::{Progress, Shift, ShiftRun};

const OP: &str = "mean_shift";

/// What MeanShift found.
#[derive(Debug, Clone, PartialEq)]
pub struct MeanShiftFit {
    /// The modes (`C × d`), most populated first.
    pub modes: Array2<f32>,
    /// One label per input point: the index of its mode in
    /// [`modes`](Self::modes), or −1 for a point farther than one bandwidth
    /// from every mode when `cluster_all` is off. Non-blurring, a point
    /// gets the mode nearest to it (as in scikit-learn); blurring, the mode
    /// nearest to where the point moved.
    pub labels: Array1<i64>,
    /// For each mode, the number of input points at distance < h from it
    /// (what the modes are ranked by); blurring, of moved points. A seed
    /// that `max_iter` stopped is counted where it was before its last
    /// step, as scikit-learn counts it.
    pub populations: Vec<usize>,
    /// Iterations run (the most shifts any seed took).
    pub iterations: usize,
    /// Whether every seed stopped within `max_iter`.
    pub converged: bool,
    /// The bandwidth used (given or estimated).
    pub bandwidth: f32,
}

impl MeanShiftFit {
    /// The number of points labelled with each mode.
    pub fn cluster_sizes(&self) -> Vec<usize> {
        let mut sizes = vec![0; self.modes.nrows()];
        for &l in &self.labels {
            if l >= 0 {
                sizes[l as usize] += 1;
            }
        }
        sizes
    }
}

impl Engine {
    /// MeanShift clustering of `points` (`N × d`) with `params`.
    ///
    /// Each seed moves to the local mean of the points around it until its
    /// shift is at most `tol·h` (or `max_iter` shifts); blurring, the
    /// points themselves move. A seed whose neighbourhood is empty stays
    /// where it is. The final positions are ranked and merged as in
    /// scikit-learn: by the number of points within one bandwidth, a seed
    /// within one bandwidth of a stronger one dropped, seeds with no point
    /// within one bandwidth dropped; then every point is labelled by its
    /// nearest mode (on the engine's backend).
    ///
    /// Coordinates are centred on the middle of the data's bounding box
    /// while iterating (constant data then converges in one step, and
    /// offsets do not eat f32 precision). A shift within f32 rounding of a
    /// seed's coordinates (`2⁻²¹·max|x|` after centring) also counts as
    /// converged.
    ///
    /// ```
    /// use locus::{Engine, MeanShiftParams};
    /// use ndarray::array;
    /// let x = array![[0.0f32, 0.0], [0.1, 0.0], [0.0, 0.1], [5.0, 5.0], [5.1, 5.0]];
    /// let params = MeanShiftParams::new().bandwidth(1.0).check()?;
    /// let fit = Engine::cpu().mean_shift(&params, x.view())?;
    /// assert_eq!(fit.modes.nrows(), 2);
    /// assert_eq!(fit.labels.to_vec(), vec![0, 0, 0, 1, 1]);
    /// assert_eq!(fit.populations, vec![3, 2]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    ///
    /// # Errors
    /// Empty or non-finite points; given seeds of another dimension
    /// ([`ClusterError::SeedDimension`]); a bandwidth rule that fails on
    /// this data ([`ClusterError::DegenerateBandwidth`]); no seed with a
    /// point within one bandwidth ([`ClusterError::NoModes`]); backend
    /// failures.
    pub fn mean_shift(
        &self,
        params: &MeanShiftValidParams,
        points: ArrayView2<'_, f32>,
    ) -> Result<MeanShiftFit> {
        self.mean_shift_with_progress(params, points, |_| {})
    }

    /// [`mean_shift`](Self::mean_shift), calling `progress` after every
    /// iteration with the iteration number, the seeds still moving and the
    /// largest shift.
    ///
    /// # Errors
    /// As [`mean_shift`](Self::mean_shift).
    pub fn mean_shift_with_progress(
        &self,
        params: &MeanShiftValidParams,
        points: ArrayView2<'_, f32>,
        progress: impl FnMut(&Progress),
    ) -> Result<MeanShiftFit> {
        if let Some(rule) = params.adaptive_bandwidth() {
            return self.variable_shift(params, rule, points, progress);
        }
        let x = Matrix::check(OP, "points", points)?;
        if params.product_kernel().is_some() {
            drop(x);
            return self.mean_shift_owned(params, try_owned(OP, "points", points)?, progress);
        }
        let start = self.shift_start(params, &x)?;
        let xc = self.install(|| centred(x.as_slice(), &start.center))?;
        drop(x);
        self.shift_from(params, start, xc, progress)
    }

    /// [`mean_shift_with_progress`](Self::mean_shift_with_progress) on
    /// points the engine may take over: they are centred in place rather
    /// than copied, so clustering large data needs no second copy of it.
    /// The results are the same.
    ///
    /// # Errors
    /// As [`mean_shift`](Self::mean_shift).
    pub fn mean_shift_owned(
        &self,
        params: &MeanShiftValidParams,
        points: Array2<f32>,
        progress: impl FnMut(&Progress),
    ) -> Result<MeanShiftFit> {
        if let Some(rule) = params.adaptive_bandwidth() {
            return self.variable_shift(params, rule, points.view(), progress);
        }
        let points = if points.is_standard_layout() {
            points
        } else {
            try_owned(OP, "points", points.view())?
        };
        match params.product_kernel() {
            Some(kernel) => self.product_shift(params, kernel, points, progress),
            None => self.shift_points(params, points, progress),
        }
    }

    /// [`mean_shift_owned`](Self::mean_shift_owned) on standard-layout
    /// points, in the kernel's units (a product's scaled to unit bandwidths).
    fn shift_points(
        &self,
        params: &MeanShiftValidParams,
        points: Array2<f32>,
        progress: impl FnMut(&Progress),
    ) -> Result<MeanShiftFit> {
        let len = points.len();
        let start = {
            let x = Matrix::check(OP, "points", points.view())?;
            self.shift_start(params, &x)?
        };
        let (mut xc, offset) = points.into_raw_vec_and_offset();
        xc.drain(..offset.unwrap_or(0).min(xc.len()));
        xc.truncate(len);
        self.install(|| {
            xc.par_chunks_exact_mut(start.d).for_each(|row| {
                for (v, &c) in row.iter_mut().zip(&start.center) {
                    *v = (f64::from(*v) - c) as f32;
                }
            });
        });
        self.shift_from(params, start, xc, progress)
    }

    /// Joint MeanShift with a product kernel: every block divided by its
    /// bandwidth, the shift with unit bandwidths, the modes scaled back.
    fn product_shift(
        &self,
        params: &MeanShiftValidParams,
        kernel: &Kernel,
        mut points: Array2<f32>,
        progress: impl FnMut(&Progress),
    ) -> Result<MeanShiftFit> {
        Matrix::check(OP, "points", points.view())?;
        let d = points.ncols();
        kernel.check_dim(OP, d)?;
        let h = kernel.coordinate_bandwidths(d);
        super::block_units(points.view_mut(), &h, false);
        let unit = params.unit_product(&h)?;
        let mut fit = self.shift_points(&unit, points, progress)?;
        super::block_units(fit.modes.view_mut(), &h, true);
        Ok(fit)
    }

    /// Bandwidth, kernel, centre and (unless every point is one) seeds.
    fn shift_start(&self, params: &MeanShiftValidParams, x: &Matrix<'_>) -> Result<ShiftStart> {
        let (n, d) = (x.rows(), x.cols());
        let h = self.resolve_bandwidth(params.bandwidth(), x)?;
        let kernel = match params.product_kernel() {
            // The points are already in units of the blocks' bandwidths.
            Some(k) => *k,
            None => Kernel::new(params.profile(), h)?,
        };
        let center = midpoint(x.as_slice(), d);
        let seeds = match params.seeds() {
            Seeds::All => None,
            Seeds::Binned { min_bin_freq } => Some(
                self.install(|| centred(&bin_seeds(x.as_slice(), d, h, *min_bin_freq), &center))?,
            ),
            Seeds::Given(s) => {
                if s.ncols() != d {
                    return Err(ClusterError::SeedDimension {
                        seeds: s.ncols(),
                        points: d,
                    }
                    .into());
                }
                let given = try_collect(OP, "seeds", s.len(), s.iter().copied())?;
                Some(self.install(|| centred(&given, &center))?)
            }
        };
        if seeds.as_ref().is_some_and(Vec::is_empty) {
            return Err(ClusterError::NoModes {
                seeds: 0,
                bandwidth: h,
            }
            .into());
        }
        Ok(ShiftStart {
            n,
            d,
            h,
            kernel,
            center,
            seeds,
        })
    }

    /// The iterations and post-processing on the centred points `xc`.
    fn shift_from(
        &self,
        params: &MeanShiftValidParams,
        start: ShiftStart,
        xc: Vec<f32>,
        mut progress: impl FnMut(&Progress),
    ) -> Result<MeanShiftFit> {
        let ShiftStart {
            n,
            d,
            h,
            kernel,
            center,
            seeds,
        } = start;
        let seeds = match seeds {
            Some(s) => s,
            None => try_copy(OP, "seeds", &xc)?,
        };
        let xv = ArrayView2::from_shape((n, d), &xc).expect("n·d"); // ok: same shape as x
        let xm = Matrix::check(OP, "points", xv)?;
        let tol_h = params.tol() * f64::from(h);
        let run = ShiftRun {
            max_iter: params.max_iter(),
            thr_sq: (tol_h * tol_h) as f32,
            blurring: params.blurring(),
        };
        let backend = self.backend_impl();
        let out = backend.mean_shift(Shift {
            kernel: &kernel,
            points: &xm,
            seeds,
            rule: run,
            progress: &mut progress,
        })?;
        // Blurring, the moved points are the data the modes are judged by.
        let moved;
        let data = if run.blurring {
            moved = Matrix::check(
                OP,
                "points",
                ArrayView2::from_shape((n, d), &out.positions).expect("n·d"), // ok: one row per point
            )?;
            &moved
        } else {
            &xm
        };
        // scikit-learn counts a seed's population where it was before its
        // last step (the neighbourhood its last mean came from). A seed
        // that stopped within `tol·h` moved too little for that to matter;
        // for the seeds `max_iter` stopped, the backend kept the positions
        // before the last step.
        let before_last = if run.blurring || out.converged {
            None
        } else {
            out.before_last
        };
        let modes = select_modes(self, h, (&out.positions, before_last.as_deref()), d, data)?;
        let c = modes.populations.len();
        let mm = Matrix::check(
            OP,
            "modes",
            ArrayView2::from_shape((c, d), &modes.modes).expect("c·d"), // ok: rows of d
        )?;
        let labels = label(backend, data, &mm, h, params.cluster_all())?;
        let modes_out = uncentred_modes(modes.modes, d, &center);
        Ok(MeanShiftFit {
            modes: modes_out,
            labels: Array1::from(labels),
            populations: modes.populations,
            iterations: out.iterations,
            converged: out.converged,
            bandwidth: h,
        })
    }
}

/// Where MeanShift starts: sizes, bandwidth, kernel, the centre the
/// points are shifted by, and the centred seeds (`None`: every point).
struct ShiftStart {
    n: usize,
    d: usize,
    h: f32,
    kernel: Kernel,
    center: Vec<f64>,
    seeds: Option<Vec<f32>>,
}

/// The middle of the bounding box, per coordinate (exact for constant data).
pub(super) fn midpoint(x: &[f32], d: usize) -> Vec<f64> {
    let mut lo = vec![f64::INFINITY; d];
    let mut hi = vec![f64::NEG_INFINITY; d];
    for row in x.chunks_exact(d) {
        for (k, &v) in row.iter().enumerate() {
            lo[k] = lo[k].min(f64::from(v));
            hi[k] = hi[k].max(f64::from(v));
        }
    }
    lo.iter()
        .zip(&hi)
        .map(|(&a, &b)| f64::from(((a + b) * 0.5) as f32))
        .collect()
}

pub(super) fn centred(x: &[f32], center: &[f64]) -> Result<Vec<f32>> {
    let d = center.len();
    let mut out = try_vec(OP, "centred points", x.len() as u64, 0.0f32)?;
    out.par_chunks_exact_mut(d)
        .zip(x.par_chunks_exact(d))
        .for_each(|(o, row)| {
            for ((o, &v), &c) in o.iter_mut().zip(row).zip(center) {
                *o = (f64::from(v) - c) as f32;
            }
        });
    Ok(out)
}

/// scikit-learn's bin seeds: one per bin `round(x/h)` (half to even, in
/// f64) holding at least `min_bin_freq` points, at the bin's grid point
/// `round(x/h)·h`; the points themselves when every point has a bin of its
/// own. Points are grouped by a 32-bit hash of their bin, then by the bin
/// itself; bins are recomputed from the points rather than stored, so the
/// work memory is 8 bytes per point.
pub(crate) fn bin_seeds(x: &[f32], d: usize, h: f32, min_bin_freq: usize) -> Vec<f32> {
    let n = x.len() / d;
    let hf = f64::from(h);
    // `+ 0.0` turns −0.0 into 0.0, so both land in the same bin.
    let bin = |v: f32| (f64::from(v) / hf).round_ties_even() + 0.0;
    let row = |i: usize| x[i * d..(i + 1) * d].iter().map(move |&v| bin(v));
    let mut keyed: Vec<(u32, u32)> = (0..n)
        .into_par_iter()
        .map(|i| {
            let hash = row(i).fold(0xCBF2_9CE4_8422_2325u64, |a, v| {
                (a.rotate_left(5) ^ v.to_bits()).wrapping_mul(0x0100_0000_01B3)
            });
            ((hash ^ (hash >> 32)) as u32, i as u32)
        })
        .collect();
    keyed.par_sort_unstable();
    let same = |a: u32, b: u32| row(a as usize).eq(row(b as usize));
    let mut seeds = Vec::new();
    let mut kept = 0;
    let mut start = 0;
    let mut run: Vec<u32> = Vec::new();
    let mut rest: Vec<u32> = Vec::new();
    while start < n {
        let mut end = start + 1;
        while end < n && keyed[end].0 == keyed[start].0 {
            end += 1;
        }
        // Equal hashes: almost always one bin; split exact groups otherwise.
        run.clear();
        run.extend(keyed[start..end].iter().map(|k| k.1));
        while let Some(&first) = run.first() {
            rest.clear();
            let mut mine = 0;
            for &i in &run {
                if same(i, first) {
                    mine += 1;
                } else {
                    rest.push(i);
                }
            }
            if mine >= min_bin_freq {
                seeds.extend(row(first as usize).map(|b| (b * hf) as f32));
                kept += 1;
            }
            std::mem::swap(&mut run, &mut rest);
        }
        start = end;
    }
    if kept == n {
        return x.to_vec();
    }
    seeds
}

/// The modes (`c` rows of `d`, centred) as a matrix with the centre added
/// back (in `f64`, then rounded).
pub(super) fn uncentred_modes(modes: Vec<f32>, d: usize, center: &[f64]) -> Array2<f32> {
    let c = modes.len() / d.max(1);
    let mut out = Array2::from_shape_vec((c, d), modes).expect("c·d"); // ok: rows of d
    for mut row in out.rows_mut() {
        for (v, &c0) in row.iter_mut().zip(center) {
            *v = (f64::from(*v) + c0) as f32;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted_rows(v: Vec<f32>, d: usize) -> Vec<Vec<f32>> {
        let mut rows: Vec<Vec<f32>> = v.chunks(d).map(<[f32]>::to_vec).collect();
        rows.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
        rows
    }

    #[test]
    fn an_engine_of_one_thread_shifts_on_it() {
        let mut o = crate::EngineOptions::new(crate::Device::Cpu);
        o.threads = std::num::NonZeroUsize::new(1);
        let engine = Engine::with_options(o).unwrap();
        let x = Array2::from_shape_vec((800, 2), crate::cpu::test_data(1600, 9)).unwrap();
        let params = super::super::MeanShiftParams::new()
            .bandwidth(0.4)
            .check()
            .unwrap();
        let token = crate::CancelToken::probe();
        token.run(|| engine.mean_shift(&params, x.view())).unwrap();
        // The calling thread checks the token between iterations; every
        // other thread that did is the engine's one.
        let me = std::thread::current().name().map(str::to_owned);
        let mut seen = token.threads_seen();
        seen.retain(|n| *n != me);
        assert_eq!(seen, [Some("locus-cpu-0".to_owned())]);
    }

    #[test]
    fn bin_seeds_follow_scikit_learn() {
        // x/h = 0.5 and 2.5 round half to even (to 0 and 2); −0.2 and 0.2
        // share bin 0 (no separate −0 bin).
        let x = [
            0.5f32, 0.0, -0.2, 0.0, 0.2, 0.0, 2.5, 0.0, 2.4, 0.0, 7.0, 7.0,
        ];
        let seeds = sorted_rows(bin_seeds(&x, 2, 1.0, 1), 2);
        assert_eq!(seeds, vec![vec![0.0, 0.0], vec![2.0, 0.0], vec![7.0, 7.0]]);
        let seeds = sorted_rows(bin_seeds(&x, 2, 1.0, 2), 2);
        assert_eq!(seeds, vec![vec![0.0, 0.0], vec![2.0, 0.0]]);
        assert!(bin_seeds(&x, 2, 1.0, 4).is_empty());
        // Bins of side h = 2 land on multiples of 2.
        let seeds = sorted_rows(bin_seeds(&[3.1f32, 5.2], 1, 2.0, 1), 1);
        assert_eq!(seeds, vec![vec![3.1], vec![5.2]]); // every bin single: the points
        let seeds = sorted_rows(bin_seeds(&[3.1f32, 3.3, 5.2], 1, 2.0, 1), 1);
        assert_eq!(seeds, vec![vec![4.0], vec![6.0]]);
    }

    #[test]
    fn points_handed_over_give_the_same_fit() {
        use crate::cluster::params::MeanShiftParams;
        let x = Array2::from_shape_fn((301, 2), |(i, j)| {
            ((i * 37 + j * 11) % 97) as f32 * 0.05 + (i % 3) as f32 * 10.0 + 1000.0
        });
        let e = Engine::cpu();
        for seeds in [Seeds::All, Seeds::Binned { min_bin_freq: 2 }] {
            let p = MeanShiftParams::new()
                .bandwidth(1.5)
                .seeds(seeds)
                .check()
                .expect("valid");
            let want = e.mean_shift(&p, x.view()).expect("view");
            let got = e.mean_shift_owned(&p, x.clone(), |_| {}).expect("owned");
            assert_eq!(got, want);
            // A column-major copy and a sliced array are handled too.
            let mut f = Array2::zeros(ndarray::ShapeBuilder::f((301, 2)));
            f.assign(&x);
            assert!(!f.is_standard_layout());
            assert_eq!(e.mean_shift_owned(&p, f, |_| {}).expect("fortran"), want);
            let mut wide = Array2::zeros((302, 2));
            wide.slice_mut(ndarray::s![1.., ..]).assign(&x);
            let sliced = wide.slice_move(ndarray::s![1.., ..]);
            assert_eq!(
                e.mean_shift_owned(&p, sliced, |_| {}).expect("sliced"),
                want
            );
        }
    }

    #[test]
    fn seeds_stopped_by_max_iter_are_counted_before_their_last_step() {
        use crate::cluster::params::MeanShiftParams;
        // From 0.2 the only point within 1.1 is 1.0: one step lands there,
        // where three points are within 1.1; scikit-learn counts the one
        // the step came from.
        let x = Array2::from_shape_vec((4, 1), vec![-1.0f32, 1.0, 1.5, 2.0]).expect("4×1");
        let seeds = Array2::from_shape_vec((1, 1), vec![0.2f32]).expect("1×1");
        let e = Engine::cpu();
        let fit = |max_iter| {
            let p = MeanShiftParams::new()
                .bandwidth(1.1)
                .seeds(Seeds::Given(seeds.clone()))
                .max_iter(max_iter)
                .check()
                .expect("valid");
            e.mean_shift(&p, x.view()).expect("fit")
        };
        let one = fit(1);
        assert!(!one.converged);
        assert_eq!(one.modes[[0, 0]], 1.0);
        assert_eq!(one.populations, vec![1]);
        // Converged, the population is where the seed stopped.
        let all = fit(300);
        assert!(all.converged);
        assert_eq!(all.populations, vec![3]);
    }

    #[test]
    fn midpoint_is_exact_for_constant_data() {
        let x = vec![1234.5f32; 6];
        let c = midpoint(&x, 3);
        assert_eq!(c, vec![1234.5; 3]);
        assert!(centred(&x, &c).unwrap().iter().all(|&v| v == 0.0));
    }
}
