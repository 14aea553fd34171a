//! A k-d split: points sorted so that every node of a binary tree over
//! them (each cut at the median of its widest coordinate) holds a
//! contiguous range of the sorted order, with the node's bounding box. It
//! indexes key sets in more coordinates than a grid serves (`grid.rs`
//! grids at most three; a box of a few cells along three of many
//! coordinates prunes little): the points near a box of queries come as
//! the ranges of the leaves whose boxes lie within reach of it, adjacent
//! ones merged.

/// Most points in a leaf: a leaf's keys are visited as one range, so
/// smaller leaves prune more finely but cost more ranges per group.
pub(crate) const LEAF: usize = 512;

/// A node: rows `start..end` of the sorted order; an inner node's
/// children split them at coordinate `dim`, value `cut` (left: below).
#[derive(Debug, Clone, Copy)]
struct Node {
    start: u32,
    end: u32,
    /// Children (0: a leaf; the root is node 0, never a child).
    left: u32,
    right: u32,
    dim: u32,
    cut: f32,
}

/// Nodes of more points than this cut their halves in parallel.
const PARALLEL: usize = 1 << 15;

/// A node while the tree is cut: rows `start..end`, their box, and the
/// cut and children of an inner node.
struct Sub {
    start: usize,
    end: usize,
    lo: Vec<f32>,
    hi: Vec<f32>,
    dim: usize,
    cut: f32,
    children: Option<Box<(Sub, Sub)>>,
}

/// Cuts `order` (the rows `start..start + order.len()` of the sorted
/// order) at the median of its widest coordinate, recursively.
fn split(
    order: &mut [u32],
    start: usize,
    d: usize,
    at: &(impl Fn(u32, usize) -> f32 + Sync),
) -> Sub {
    let (mut lo, mut hi) = (vec![f32::INFINITY; d], vec![f32::NEG_INFINITY; d]);
    for &i in order.iter() {
        for k in 0..d {
            let v = at(i, k);
            lo[k] = lo[k].min(v);
            hi[k] = hi[k].max(v);
        }
    }
    // The widest coordinate (keys are checked finite).
    let (dim, width) = (0..d)
        .map(|k| (k, f64::from(hi[k]) - f64::from(lo[k])))
        .fold((0, 0.0), |b, c| if c.1 > b.1 { c } else { b });
    let len = order.len();
    let mut sub = Sub {
        start,
        end: start + len,
        lo,
        hi,
        dim,
        cut: 0.0,
        children: None,
    };
    if len <= LEAF || width <= 0.0 {
        return sub;
    }
    let mid = len / 2;
    order.select_nth_unstable_by(mid, |&a, &b| at(a, dim).total_cmp(&at(b, dim)));
    sub.cut = at(order[mid], dim);
    let (l, r) = order.split_at_mut(mid);
    let halves = if len > PARALLEL {
        rayon::join(|| split(l, start, d, at), || split(r, start + mid, d, at))
    } else {
        (split(l, start, d, at), split(r, start + mid, d, at))
    };
    sub.children = Some(Box::new(halves));
    sub
}

/// Points sorted by leaf of a k-d split, with every node's box.
#[derive(Debug, Clone)]
pub(crate) struct KdTree {
    d: usize,
    /// Point indices in leaf order.
    pub order: Vec<u32>,
    nodes: Vec<Node>,
    /// Per node, its points' lowest and highest value of each coordinate
    /// (`nodes × d`).
    lo: Vec<f32>,
    hi: Vec<f32>,
}

impl KdTree {
    /// Bytes a tree over `n` points in `d` coordinates holds (its sorted
    /// order, its nodes and their boxes, at most two nodes a leaf).
    pub(crate) fn bytes(n: usize, d: usize) -> u64 {
        let nodes = (2 * n.div_ceil(LEAF / 2)).max(1) as u64;
        let node = std::mem::size_of::<Node>() as u64 + 8 * d as u64;
        (n as u64)
            .saturating_mul(4)
            .saturating_add(nodes.saturating_mul(node))
    }

    /// The tree of `n` points stored column-major: coordinate `k` of point
    /// `i` at `xt[k·ld + i]`. A node is cut while it holds more than
    /// [`LEAF`] points and its box has some width; large nodes' halves are
    /// cut in parallel (on the current rayon pool).
    pub(crate) fn from_columns(xt: &[f32], (n, ld, d): (usize, usize, usize)) -> KdTree {
        let at = |i: u32, k: usize| xt[k * ld + i as usize];
        let mut order: Vec<u32> = (0..n as u32).collect();
        let root = split(&mut order, 0, d, &at);
        let mut t = KdTree {
            d,
            order,
            nodes: Vec::new(),
            lo: Vec::new(),
            hi: Vec::new(),
        };
        t.flatten(root);
        t
    }

    /// Appends `sub` and its descendants depth first, left before right
    /// (node 0 the root); returns its index.
    fn flatten(&mut self, sub: Sub) -> u32 {
        let id = self.nodes.len() as u32;
        self.lo.extend_from_slice(&sub.lo);
        self.hi.extend_from_slice(&sub.hi);
        self.nodes.push(Node {
            start: sub.start as u32,
            end: sub.end as u32,
            left: 0,
            right: 0,
            dim: sub.dim as u32,
            cut: sub.cut,
        });
        if let Some(children) = sub.children {
            let (l, r) = *children;
            let left = self.flatten(l);
            let right = self.flatten(r);
            let node = &mut self.nodes[id as usize];
            (node.left, node.right) = (left, right);
        }
        id
    }

    /// The leaf holding a point at `row` (or where it would be): the key
    /// queries are grouped by.
    pub(crate) fn key_of(&self, row: &[f32]) -> u64 {
        let mut id = 0usize;
        loop {
            let n = &self.nodes[id];
            if n.left == 0 {
                return id as u64;
            }
            // Ties go right, as the median itself went.
            id = if row[n.dim as usize] < n.cut {
                n.left
            } else {
                n.right
            } as usize;
        }
    }

    /// Appends to `out` the ranges of the sorted order holding every point
    /// within reach of the query box `lo..=hi` (indexed by coordinate,
    /// already widened by each coordinate's reach, as
    /// [`crate::grid::query_box`] gives it): the leaves whose boxes meet
    /// that box, and, with `radius` (a radial kernel's reach), whose
    /// Euclidean distance to the unwidened box is at most the radius.
    /// Adjacent ranges are merged.
    pub(crate) fn ranges(
        &self,
        lo: &[f64],
        hi: &[f64],
        radius: Option<f64>,
        out: &mut Vec<(usize, usize)>,
    ) {
        let d = self.d;
        let mut stack = vec![0usize];
        while let Some(id) = stack.pop() {
            let n = &self.nodes[id];
            let (blo, bhi) = (
                &self.lo[id * d..(id + 1) * d],
                &self.hi[id * d..(id + 1) * d],
            );
            let mut gap2 = 0.0f64;
            let mut meets = true;
            for k in 0..d {
                let (a, b) = (f64::from(blo[k]), f64::from(bhi[k]));
                if a > hi[k] || b < lo[k] {
                    meets = false;
                    break;
                }
                if let Some(r) = radius {
                    // Distance along k from the node's box to the queries'.
                    let g = (a - (hi[k] - r)).max((lo[k] + r) - b).max(0.0);
                    gap2 += g * g;
                }
            }
            if !meets || radius.is_some_and(|r| gap2 > r * r) {
                continue;
            }
            if n.left == 0 {
                let (p0, p1) = (n.start as usize, n.end as usize);
                match out.last_mut() {
                    Some(last) if last.1 == p0 => last.1 = p1,
                    _ => out.push((p0, p1)),
                }
            } else {
                stack.push(n.right as usize);
                stack.push(n.left as usize);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` points in `d` coordinates, in clumps, column-major.
    fn clumps(n: usize, d: usize) -> Vec<f32> {
        let mut s = 0x9e37_79b9_u32;
        let mut u = || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s as f32 / u32::MAX as f32
        };
        let centres: Vec<f32> = (0..8 * d).map(|_| 20.0 * u()).collect();
        let mut xt = vec![0.0f32; n * d];
        for i in 0..n {
            let c = i % 8;
            for k in 0..d {
                xt[k * n + i] = centres[c * d + k] + u() - 0.5;
            }
        }
        xt
    }

    fn at(xt: &[f32], n: usize, i: usize, k: usize) -> f32 {
        xt[k * n + i]
    }

    #[test]
    fn the_order_is_a_permutation_and_nodes_nest_with_tight_boxes() {
        for (n, d) in [(1usize, 3usize), (513, 9), (5000, 12), (3000, 40)] {
            let xt = clumps(n, d);
            let t = KdTree::from_columns(&xt, (n, n, d));
            let mut seen = t.order.clone();
            seen.sort_unstable();
            assert!(seen.iter().enumerate().all(|(i, &v)| v as usize == i));
            assert!(t.nodes.len() <= 2 * n.div_ceil(LEAF / 2).max(1));
            for (id, node) in t.nodes.iter().enumerate() {
                let (a, b) = (node.start as usize, node.end as usize);
                for k in 0..d {
                    let vals = t.order[a..b].iter().map(|&i| at(&xt, n, i as usize, k));
                    let (mn, mx) = vals.fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), v| {
                        (l.min(v), h.max(v))
                    });
                    assert_eq!((t.lo[id * d + k], t.hi[id * d + k]), (mn, mx));
                }
                if node.left != 0 {
                    let (l, r) = (t.nodes[node.left as usize], t.nodes[node.right as usize]);
                    assert_eq!(
                        (l.start, l.end, r.start, r.end),
                        (node.start, l.end, l.end, node.end)
                    );
                    let k = node.dim as usize;
                    assert!(
                        t.order[a..l.end as usize]
                            .iter()
                            .all(|&i| at(&xt, n, i as usize, k) <= node.cut)
                    );
                    assert!(
                        t.order[l.end as usize..b]
                            .iter()
                            .all(|&i| at(&xt, n, i as usize, k) >= node.cut)
                    );
                } else {
                    assert!(
                        b - a <= LEAF || t.lo[id * d..(id + 1) * d] == t.hi[id * d..(id + 1) * d]
                    );
                }
            }
        }
    }

    /// Every point within reach of the queries is in the ranges; on
    /// clumped data far fewer points are visited than there are.
    #[test]
    fn ranges_cover_every_point_within_reach_and_prune() {
        let (n, d) = (6000usize, 16usize);
        let xt = clumps(n, d);
        let t = KdTree::from_columns(&xt, (n, n, d));
        let mut visited = 0usize;
        for (qi, r) in [(0usize, 0.9f64), (7, 1.5), (4001, 3.0), (123, 0.0)] {
            let q: Vec<f32> = (0..d).map(|k| at(&xt, n, qi, k) + 0.1).collect();
            let reach = vec![r; d];
            let (lo, hi) = crate::grid::query_box(&q, d, &reach);
            for radius in [Some(r), None] {
                let mut out = Vec::new();
                t.ranges(&lo, &hi, radius, &mut out);
                assert!(
                    out.windows(2).all(|w| w[0].1 < w[1].0),
                    "sorted, merged: {out:?}"
                );
                let inside: Vec<u32> = out
                    .iter()
                    .flat_map(|&(a, b)| t.order[a..b].to_vec())
                    .collect();
                for i in 0..n {
                    let dist2: f64 = (0..d)
                        .map(|k| (f64::from(at(&xt, n, i, k)) - f64::from(q[k])).powi(2))
                        .sum();
                    if dist2 <= r * r {
                        assert!(
                            inside.contains(&(i as u32)),
                            "point {i} within {r} of query {qi}"
                        );
                    }
                }
                visited += inside.len();
            }
        }
        assert!(
            visited < 8 * n / 3,
            "visited {visited} of {} point visits",
            8 * n
        );
        // A box beyond every point: nothing.
        let far = vec![1e6f32; d];
        let (lo, hi) = crate::grid::query_box(&far, d, &vec![1.0; d]);
        let mut out = Vec::new();
        t.ranges(&lo, &hi, Some(1.0), &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn a_query_is_keyed_by_the_leaf_it_falls_in() {
        let (n, d) = (4000usize, 10usize);
        let xt = clumps(n, d);
        let t = KdTree::from_columns(&xt, (n, n, d));
        for i in (0..n).step_by(37) {
            let row: Vec<f32> = (0..d).map(|k| at(&xt, n, i, k)).collect();
            let leaf = &t.nodes[t.key_of(&row) as usize];
            assert_eq!(leaf.left, 0);
            let pos = t.order.iter().position(|&j| j as usize == i).unwrap();
            // Equal values may sit on either side of a cut: the point is in
            // the leaf, or in a leaf whose box holds the row.
            let id = t.key_of(&row) as usize;
            let inside = (0..d).all(|k| t.lo[id * d + k] <= row[k] && row[k] <= t.hi[id * d + k]);
            assert!((leaf.start as usize..leaf.end as usize).contains(&pos) || inside);
        }
    }
}
